// A self-contained copy of the running agent (its executable, every shared object it has mapped, its
// program interpreter) installed into a directory, so that a container image without the agent can
// run it: `DIR/lib/ld.so --library-path DIR/lib DIR/bin/infergate-agent exec ...` (docs/agent.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::agent {

// One line of /proc/PID/maps.
struct Mapping {
  uintptr_t start = 0;
  uintptr_t end = 0;
  std::string path;      // empty for an anonymous mapping; "[heap]", "[vdso]", ... for special ones
  bool deleted = false;  // the kernel's " (deleted)": the file was removed or replaced after mapping
};

// Parses the text of /proc/PID/maps; a malformed line is an error naming it.
Result<std::vector<Mapping>> parse_maps(std::string_view text);

// A file-backed mapping whose base name is a shared object's: "libc.so.6", "ld-linux-x86-64.so.2",
// "libfoo.so", "ld.so" (not "model.so.bak", "/dev/zero" or "[vdso]").
bool looks_like_shared_object(std::string_view path);

// What the agent needs from an ELF file of this process's class and byte order: its program
// interpreter (PT_INTERP) and its DT_SONAME, each absent when the file has none.
struct ElfInfo {
  std::optional<std::string> interpreter;
  std::optional<std::string> soname;
};
// Reads the headers of the ELF file whose bytes are `image` (`what` names it in errors). Refuses a file
// that is not ELF, is of another class or byte order, or whose headers point outside the file.
Result<ElfInfo> read_elf_info(std::string_view image, std::string_view what);

struct InstalledAgent {
  std::filesystem::path binary;        // DIR/bin/infergate-agent
  std::filesystem::path loader;        // DIR/lib/ld.so
  std::vector<std::string> libraries;  // the file names written under DIR/lib (ld.so excluded)
};

// Installs the running agent into `dir`, which must exist:
//   dir/bin/infergate-agent  the executable (/proc/self/exe, or the program ld.so was asked to run)
//   dir/lib/<SONAME>         every shared object in /proc/self/maps, named by its DT_SONAME (the name
//                            the loader looks for) or, lacking one, by its file name
//   dir/lib/ld.so            the program interpreter the agent was loaded by
// Guarantees: each file is written to a temporary name in its directory, fsynced, made mode 0555 and
// renamed into place, then the directory is fsynced: a reader sees the old file or the whole new one,
// never part of one; no temporary file is left behind, even on failure.
// Errors carry the reason AgentInstallFailed, the path and the errno text ("file" detail: the path).
// Assumptions: the objects on disk are the ones mapped (a mapping the kernel marks deleted is refused).
// Caveats: a library the agent would dlopen only later is not copied; the agent dlopens none.
Result<InstalledAgent> install_self(const std::filesystem::path& dir);

}  // namespace infergate::agent
