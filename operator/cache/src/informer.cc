// The informer loop: watcher steps applied to the store and dispatched to handlers.
#include "infergate/operator/cache/informer.h"

#include <random>

#include "infergate/common/log.h"

namespace infergate::op::cache {

void strip_managed_fields(Json& obj) {
  if (auto m = obj.find("metadata"); m != obj.end() && m->is_object()) m->erase("managedFields");
}

Informer::Informer(client::Client& client, client::ResourceKind kind, InformerConfig config, Clock& clock)
    : kind_(kind),
      config_(std::move(config)),
      clock_(clock),
      watcher_(client, std::move(kind), config_.watcher) {
  if (!config_.transform) config_.transform = strip_managed_fields;
}

Informer::~Informer() { stop(); }

void Informer::add_handler(EventHandler handler) { handlers_.push_back(std::move(handler)); }

InformerStats Informer::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

void Informer::apply(WatcherEvent ev) {
  std::lock_guard dispatch(dispatch_mu_);
  switch (ev.type) {
    case WatcherEvent::Type::kApplied: {
      Json obj = std::move(ev.objects.front());
      config_.transform(obj);
      auto now = std::make_shared<const Json>(std::move(obj));
      Object old = store_.upsert(now);
      for (auto& h : handlers_) {
        if (old && h.on_update) {
          h.on_update(*old, *now);
        } else if (!old && h.on_add) {
          h.on_add(*now);
        }
      }
      break;
    }
    case WatcherEvent::Type::kDeleted: {
      Object old = store_.remove(client::object_key(ev.objects.front()));
      Json last = ev.objects.front();
      config_.transform(last);
      for (auto& h : handlers_) {
        if (h.on_delete) h.on_delete(old ? *old : last);
      }
      break;
    }
    case WatcherEvent::Type::kRestarted: {
      std::vector<Object> next;
      next.reserve(ev.objects.size());
      std::vector<std::pair<Object, Object>> changes;  // (old, new); old null for adds
      for (auto& o : ev.objects) {
        Json obj = std::move(o);
        config_.transform(obj);
        auto now = std::make_shared<const Json>(std::move(obj));
        changes.emplace_back(store_.get(client::object_key(*now)), now);
        next.push_back(now);
      }
      std::vector<Object> gone = store_.replace(std::move(next));
      for (auto& h : handlers_) {
        for (const auto& [old, now] : changes) {
          if (old && h.on_update) {
            if (client::object_resource_version(*old) != client::object_resource_version(*now))
              h.on_update(*old, *now);
          } else if (!old && h.on_add) {
            h.on_add(*now);
          }
        }
        for (const auto& g : gone) {
          if (h.on_delete) h.on_delete(*g);  // deleted while we were not watching
        }
      }
      synced_ = true;
      break;
    }
  }
}

Status Informer::step() {
  const Watcher::State before = watcher_.state();
  auto ev = watcher_.step();
  if (!ev.ok()) {
    std::lock_guard lock(stats_mu_);
    if (ev.error().reason() == "Expired") {
      ++stats_.expired;
    } else if (ev.error().code() != ErrorCode::kCancelled) {
      ++stats_.errors;
    }
    return std::move(ev).error();
  }
  if (ev->has_value()) {
    {
      std::lock_guard lock(stats_mu_);
      ++stats_.events;
      if ((*ev)->type == WatcherEvent::Type::kRestarted) ++stats_.relists;
    }
    apply(std::move(**ev));
  } else if (before == Watcher::State::kInitListed && watcher_.state() == Watcher::State::kWatching) {
    std::lock_guard lock(stats_mu_);
    ++stats_.watch_restarts;  // a watch (re)opened
  }
  return ok_status();
}

void Informer::set_backing_off(bool on) {
  std::lock_guard lock(stats_mu_);
  stats_.backing_off = on;
}

void Informer::run() {
  std::mt19937_64 rng(std::random_device{}());
  std::chrono::milliseconds backoff = config_.initial_backoff;
  while (!stop_.stopped()) {
    Status st = step();
    if (st.ok()) {
      if (watcher_.state() == Watcher::State::kWatching) backoff = config_.initial_backoff;
      continue;
    }
    if (stop_.stopped() || st.error().code() == ErrorCode::kCancelled) break;
    if (st.error().reason() == "Expired") {
      log::info("watch expired, re-listing", {{"resource", kind_.resource()}});
      continue;  // 410: re-list at once
    }
    std::uniform_real_distribution<double> jitter(1.0, 1.5);
    auto delay =
        std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(backoff.count()) * jitter(rng)));
    log::warn("watch failed, backing off", {{"resource", kind_.resource()},
                                            {"error", st.error().to_string()},
                                            {"backoff_ms", static_cast<long long>(delay.count())}});
    set_backing_off(true);
    const bool waited = stop_.wait_for(clock_, delay);
    set_backing_off(false);
    if (!waited) break;
    backoff = std::min(backoff * 2, config_.max_backoff);
  }
}

void Informer::resync_loop() {
  while (stop_.wait_for(clock_, config_.resync_period)) {
    if (!synced_) continue;
    std::lock_guard dispatch(dispatch_mu_);
    for (const auto& obj : store_.list()) {
      for (auto& h : handlers_) {
        if (h.on_update) h.on_update(*obj, *obj);
      }
    }
  }
}

void Informer::start() {
  thread_ = std::thread([this] { run(); });
  if (config_.resync_period.count() > 0) resync_thread_ = std::thread([this] { resync_loop(); });
}

void Informer::stop() {
  stop_.stop();
  watcher_.cancel();
  if (thread_.joinable()) thread_.join();
  if (resync_thread_.joinable()) resync_thread_.join();
}

}  // namespace infergate::op::cache
