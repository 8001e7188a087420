// The list-then-watch state machine.
#include "infergate/operator/cache/watcher.h"

namespace infergate::op::cache {

namespace {

// An event about one object, moved in (a braced list would copy it).
WatcherEvent one(WatcherEvent::Type type, Json object) {
  WatcherEvent ev{type, {}};
  ev.objects.push_back(std::move(object));
  return ev;
}

}  // namespace

std::string_view to_string(Watcher::State s) {
  switch (s) {
    case Watcher::State::kEmpty: return "Empty";
    case Watcher::State::kInitListed: return "InitListed";
    case Watcher::State::kWatching: return "Watching";
  }
  return "?";
}

Watcher::Watcher(client::Client& client, client::ResourceKind kind, WatcherConfig config)
    : client_(client), kind_(std::move(kind)), config_(std::move(config)) {}

std::string Watcher::resource_version() const {
  std::lock_guard lock(mu_);
  return rv_;
}

void Watcher::cancel() {
  cancelled_ = true;
  std::shared_ptr<client::WatchStream> s;
  {
    std::lock_guard lock(mu_);
    s = stream_;
  }
  if (s) s->cancel();
}

Result<std::optional<WatcherEvent>> Watcher::step() {
  if (cancelled_)
    return Error(ErrorCode::kCancelled, "watch " + kind_.resource() + ": cancelled", "Cancelled");
  switch (state_) {
    case State::kEmpty: {
      client::ListOptions lo;
      lo.label_selector = config_.label_selector;
      lo.field_selector = config_.field_selector;
      auto list = client::list_all(client_, kind_, config_.namespace_, lo, config_.page_size);
      if (!list.ok()) return std::move(list).error().with_reason("ListFailed");
      {
        std::lock_guard lock(mu_);
        rv_ = list->resource_version;
      }
      state_ = State::kInitListed;
      return std::optional<WatcherEvent>(
          WatcherEvent{WatcherEvent::Type::kRestarted, std::move(list->items)});
    }
    case State::kInitListed: {
      client::WatchOptions wo;
      wo.resource_version = resource_version();
      wo.label_selector = config_.label_selector;
      wo.field_selector = config_.field_selector;
      wo.timeout = config_.watch_timeout;
      auto stream = client_.watch(kind_, config_.namespace_, wo);
      if (!stream.ok()) {
        if (client::is_gone(stream.error())) {
          state_ = State::kEmpty;
          return std::move(stream).error().with_reason("Expired");
        }
        return std::move(stream).error().with_reason("WatchStartFailed");
      }
      {
        std::lock_guard lock(mu_);
        stream_ = std::shared_ptr<client::WatchStream>(std::move(*stream));
      }
      if (cancelled_) stream_->cancel();
      state_ = State::kWatching;
      return std::optional<WatcherEvent>();
    }
    case State::kWatching: {
      std::shared_ptr<client::WatchStream> s;
      {
        std::lock_guard lock(mu_);
        s = stream_;
      }
      auto ev = s->next();
      auto close = [&](State next) {
        std::lock_guard lock(mu_);
        stream_.reset();
        state_ = next;
      };
      if (!ev.ok()) {
        close(State::kInitListed);
        if (ev.error().code() == ErrorCode::kCancelled) return std::move(ev).error();
        return std::move(ev).error().with_reason("WatchFailed");
      }
      if (!ev->has_value()) {
        close(State::kInitListed);  // the server ended the stream: watch again from rv
        return std::optional<WatcherEvent>();
      }
      client::WatchEvent& e = **ev;
      if (e.type == client::WatchEventType::kError) {
        int code = e.object.value("code", 0);
        std::string message = e.object.value("message", "");
        if (code == 410) {
          close(State::kEmpty);
          return Error(ErrorCode::kFailedPrecondition, "watch " + kind_.resource() + ": " + message,
                       "Expired");
        }
        close(State::kInitListed);
        return Error(ErrorCode::kUnavailable,
                     "watch " + kind_.resource() + ": error event " + std::to_string(code) + ": " + message,
                     "WatchFailed");
      }
      std::string rv = client::object_resource_version(e.object);
      if (!rv.empty()) {
        std::lock_guard lock(mu_);
        rv_ = rv;
      }
      switch (e.type) {
        case client::WatchEventType::kAdded:
        case client::WatchEventType::kModified:
          return std::optional<WatcherEvent>(one(WatcherEvent::Type::kApplied, std::move(e.object)));
        case client::WatchEventType::kDeleted:
          return std::optional<WatcherEvent>(one(WatcherEvent::Type::kDeleted, std::move(e.object)));
        default: return std::optional<WatcherEvent>();  // bookmark: only the version moved
      }
    }
  }
  return internal_error("watcher: unknown state");
}

}  // namespace infergate::op::cache
