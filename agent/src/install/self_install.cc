// install_self: copies the running agent, the shared objects /proc/self/maps shows it mapped and its
// program interpreter into a directory, each file atomically, so that another image can run it.
#include "infergate/agent/install/self_install.h"

#include <link.h>
#include <sys/auxv.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "infergate/agent/reasons.h"
#include "infergate/common/fs.h"
#include "infergate/common/log.h"

namespace infergate::agent {
namespace {

namespace fs = std::filesystem;

constexpr mode_t kInstalledMode = 0555;
// The agent is tens of MiB with its libraries; a mapped file larger than this is not one of them.
constexpr size_t kMaxObjectBytes = size_t{1} << 30;
constexpr size_t kMaxElfString = 4096;

Error install_error(std::string message, const fs::path& file) {
  return refusal(Reason::kAgentInstallFailed, std::move(message)).with_detail("file", file.string());
}

// A field of a maps line: the text up to the next space, consumed from `line`.
std::string_view next_field(std::string_view& line) {
  size_t start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(start);
  size_t end = line.find(' ');
  std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return field;
}

bool parse_hex(std::string_view s, uintptr_t* out) {
  if (s.empty() || s.size() > 2 * sizeof(uintptr_t)) return false;
  uintptr_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uintptr_t>(d);
  }
  *out = v;
  return true;
}

// Copies a T out of `image` at `offset`; false when it does not lie wholly inside.
template <class T>
bool read_at(std::string_view image, uint64_t offset, T* out) {
  if (offset > image.size() || sizeof(T) > image.size() - offset) return false;
  std::memcpy(out, image.data() + offset, sizeof(T));
  return true;
}

// The NUL-terminated string at `offset`, at most kMaxElfString bytes.
std::optional<std::string> string_at(std::string_view image, uint64_t offset) {
  if (offset >= image.size()) return std::nullopt;
  std::string_view rest = image.substr(offset, kMaxElfString);
  size_t nul = rest.find('\0');
  if (nul == std::string_view::npos) return std::nullopt;
  return std::string(rest.substr(0, nul));
}

const Mapping* mapping_at(const std::vector<Mapping>& maps, uintptr_t address) {
  for (const auto& m : maps) {
    if (m.start <= address && address < m.end) return &m;
  }
  return nullptr;
}

// The address of the main program's program headers: the loader lists the main program first.
uintptr_t main_program_phdr() {
  uintptr_t phdr = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        *static_cast<uintptr_t*>(data) = reinterpret_cast<uintptr_t>(info->dlpi_phdr);
        return 1;  // the first object is the main program: stop
      },
      &phdr);
  return phdr;
}

// One file to install: where it is read from, and its name in the installed tree.
struct Source {
  fs::path from;
  std::string what;  // for messages: "the agent executable", "the program interpreter", "library"
};

Result<std::string> read_object(const Source& s) {
  auto bytes = read_file(s.from, kMaxObjectBytes);
  if (!bytes.ok()) {
    return install_error("cannot read " + s.what + " " + s.from.string() + ": " + bytes.error().message(),
                         s.from);
  }
  return bytes;
}

Status install_file(const fs::path& to, std::string_view bytes) {
  auto st = write_file_atomic(to, bytes, kInstalledMode);
  if (!st.ok()) return install_error("cannot install " + to.string() + ": " + st.error().message(), to);
  return ok_status();
}

Result<fs::path> make_subdir(const fs::path& dir, const char* name) {
  fs::path sub = dir / name;
  if (::mkdir(sub.c_str(), 0755) != 0 && errno != EEXIST) {
    return install_error("cannot create " + sub.string() + ": " + errno_text(errno), sub);
  }
  struct stat st {};
  if (::lstat(sub.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return install_error(sub.string() + " exists and is not a directory", sub);
  }
  return sub;
}

}  // namespace

Result<std::vector<Mapping>> parse_maps(std::string_view text) {
  std::vector<Mapping> out;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    if (line.empty()) continue;
    std::string_view rest = line;
    std::string_view range = next_field(rest);
    std::string_view perms = next_field(rest), offset = next_field(rest), dev = next_field(rest),
                     inode = next_field(rest);
    Mapping m;
    size_t dash = range.find('-');
    if (dash == std::string_view::npos || !parse_hex(range.substr(0, dash), &m.start) ||
        !parse_hex(range.substr(dash + 1), &m.end) || m.end < m.start || perms.size() != 4 ||
        offset.empty() || dev.empty() || inode.empty()) {
      return invalid_argument("maps line " + std::to_string(line_no) + " is malformed: " + std::string(line));
    }
    size_t path_start = rest.find_first_not_of(' ');
    if (path_start != std::string_view::npos) {
      std::string_view path = rest.substr(path_start);
      constexpr std::string_view kDeleted = " (deleted)";
      if (path.size() > kDeleted.size() && path.substr(path.size() - kDeleted.size()) == kDeleted) {
        m.deleted = true;
        path.remove_suffix(kDeleted.size());
      }
      m.path = path;
    }
    out.push_back(std::move(m));
  }
  return out;
}

bool looks_like_shared_object(std::string_view path) {
  if (path.empty() || path[0] != '/') return false;  // anonymous or "[vdso]", "[heap]", ...
  std::string_view base = path.substr(path.rfind('/') + 1);
  for (size_t at = base.find(".so"); at != std::string_view::npos; at = base.find(".so", at + 1)) {
    if (at == 0) continue;  // ".so" alone names nothing
    std::string_view tail = base.substr(at + 3);
    if (tail.empty()) return true;  // libfoo.so
    if (tail[0] == '.' && tail.size() > 1 && tail.find_first_not_of("0123456789.") == std::string_view::npos)
      return true;  // libfoo.so.6, libfoo.so.6.0.30
  }
  return false;
}

Result<ElfInfo> read_elf_info(std::string_view image, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return invalid_argument(std::string(what) + ": " + std::string(why));
  };
  ElfW(Ehdr) eh{};
  if (!read_at(image, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return bad("not an ELF file");
  constexpr unsigned char kClass = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
  constexpr unsigned char kData = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
  if (eh.e_ident[EI_CLASS] != kClass || eh.e_ident[EI_DATA] != kData) {
    return bad("an ELF file of another class or byte order than this process");
  }
  if (eh.e_phentsize != sizeof(ElfW(Phdr))) return bad("unexpected program header size");
  std::vector<ElfW(Phdr)> phdrs(eh.e_phnum);
  for (size_t i = 0; i < phdrs.size(); ++i) {
    if (!read_at(image, eh.e_phoff + i * sizeof(ElfW(Phdr)), &phdrs[i]))
      return bad("program headers lie outside the file");
  }
  ElfInfo info;
  const ElfW(Phdr)* dynamic = nullptr;
  for (const auto& ph : phdrs) {
    if (ph.p_type == PT_INTERP) {
      auto s = string_at(image, ph.p_offset);
      if (!s || s->empty()) return bad("PT_INTERP is not a string inside the file");
      info.interpreter = *s;
    }
    if (ph.p_type == PT_DYNAMIC) dynamic = &ph;
  }
  if (dynamic == nullptr) return info;
  uint64_t strtab_vaddr = 0, soname = 0;
  bool has_strtab = false, has_soname = false;
  for (uint64_t off = 0; off + sizeof(ElfW(Dyn)) <= dynamic->p_filesz; off += sizeof(ElfW(Dyn))) {
    ElfW(Dyn) d{};
    if (!read_at(image, dynamic->p_offset + off, &d)) return bad("the dynamic section lies outside the file");
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag == DT_STRTAB) {
      strtab_vaddr = d.d_un.d_ptr;
      has_strtab = true;
    }
    if (d.d_tag == DT_SONAME) {
      soname = d.d_un.d_val;
      has_soname = true;
    }
  }
  if (!has_soname) return info;
  if (!has_strtab) return bad("DT_SONAME without DT_STRTAB");
  for (const auto& ph : phdrs) {
    if (ph.p_type == PT_LOAD && ph.p_vaddr <= strtab_vaddr && strtab_vaddr < ph.p_vaddr + ph.p_filesz) {
      auto s = string_at(image, strtab_vaddr - ph.p_vaddr + ph.p_offset + soname);
      if (!s || s->empty()) return bad("DT_SONAME is not a string inside the file");
      if (s->find('/') != std::string::npos) return bad("DT_SONAME '" + *s + "' holds a '/'");
      info.soname = *s;
      return info;
    }
  }
  return bad("the string table is in no loaded segment");
}

Result<InstalledAgent> install_self(const fs::path& dir) {
  auto maps_text = read_file("/proc/self/maps");
  if (!maps_text.ok()) {
    return install_error("cannot read /proc/self/maps: " + maps_text.error().message(), "/proc/self/maps");
  }
  auto maps = parse_maps(*maps_text);
  if (!maps.ok()) return install_error(maps.error().message(), "/proc/self/maps");

  // The kernel either ran the agent, naming its interpreter at AT_BASE, or ran the interpreter itself
  // (`ld.so --library-path ... infergate-agent`): then /proc/self/exe is the loader, and the agent is
  // the main program the loader mapped.
  const Mapping* program = mapping_at(*maps, main_program_phdr());
  if (program == nullptr || program->path.empty() || program->path[0] != '/') {
    return install_error("cannot find the agent executable in /proc/self/maps", "/proc/self/maps");
  }
  uintptr_t interp_base = getauxval(AT_BASE);
  Source executable{"/proc/self/exe", "the agent executable"};
  Source loader{"/proc/self/exe", "the program interpreter"};
  if (interp_base != 0) {
    const Mapping* m = mapping_at(*maps, interp_base);
    if (m == nullptr || m->path.empty() || m->path[0] != '/') {
      return install_error("cannot find the program interpreter in /proc/self/maps", "/proc/self/maps");
    }
    if (m->deleted) {
      return install_error("the program interpreter " + m->path + " was deleted or replaced", m->path);
    }
    loader.from = m->path;
  } else {
    if (program->deleted) {
      return install_error("the agent executable " + program->path + " was deleted or replaced",
                           program->path);
    }
    executable.from = program->path;
  }

  INFERGATE_ASSIGN_OR_RETURN(std::string exe_bytes, read_object(executable));
  auto exe_info = read_elf_info(exe_bytes, executable.from.string());
  if (!exe_info.ok()) return install_error(exe_info.error().message(), executable.from);
  if (!exe_info->interpreter) {
    return install_error(executable.from.string() +
                             " has no program interpreter (PT_INTERP): it is not dynamically linked, "
                             "and the installed form runs it through ld.so",
                         executable.from);
  }
  INFERGATE_ASSIGN_OR_RETURN(std::string loader_bytes, read_object(loader));
  auto loader_info = read_elf_info(loader_bytes, loader.from.string());
  if (!loader_info.ok()) return install_error(loader_info.error().message(), loader.from);

  // Every mapped shared object, named as the loader will look for it: its SONAME. Held in memory
  // until all are read (the agent's are a few tens of MiB), so that nothing is written for a set
  // that cannot be completed.
  struct Library {
    std::string from;
    std::string bytes;
  };
  std::map<std::string, Library> libraries;  // installed name -> source
  for (const auto& m : *maps) {
    if (m.path == program->path || !looks_like_shared_object(m.path)) continue;
    bool seen = false;
    for (const auto& [name, lib] : libraries) seen = seen || lib.from == m.path;
    if (seen) continue;
    if (m.deleted) return install_error("the shared object " + m.path + " was deleted or replaced", m.path);
    INFERGATE_ASSIGN_OR_RETURN(std::string bytes, read_object({m.path, "the shared object"}));
    auto info = read_elf_info(bytes, m.path);
    if (!info.ok()) return install_error(info.error().message(), m.path);
    std::string name = info->soname.value_or(fs::path(m.path).filename().string());
    if (auto [it, inserted] = libraries.emplace(name, Library{m.path, std::move(bytes)}); !inserted) {
      return install_error(
          "two mapped shared objects are both named " + name + ": " + it->second.from + " and " + m.path,
          m.path);
    }
  }

  INFERGATE_ASSIGN_OR_RETURN(fs::path lib_dir, make_subdir(dir, "lib"));
  INFERGATE_ASSIGN_OR_RETURN(fs::path bin_dir, make_subdir(dir, "bin"));
  // The executable last: once bin/infergate-agent is there, everything it needs is.
  InstalledAgent out;
  for (const auto& [name, lib] : libraries) {
    INFERGATE_RETURN_IF_ERROR(install_file(lib_dir / name, lib.bytes));
    out.libraries.push_back(name);
  }
  out.loader = lib_dir / "ld.so";
  INFERGATE_RETURN_IF_ERROR(install_file(out.loader, loader_bytes));
  out.binary = bin_dir / "infergate-agent";
  INFERGATE_RETURN_IF_ERROR(install_file(out.binary, exe_bytes));
  return out;
}

}  // namespace infergate::agent
