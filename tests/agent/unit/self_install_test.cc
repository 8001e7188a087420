// The pieces of install_self that read the process: /proc/PID/maps lines, which paths are shared
// objects, and the ELF headers that name a program's interpreter and a library's SONAME.
#include "infergate/agent/install/self_install.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <link.h>
#include <cstring>

#include "infergate/common/fs.h"

namespace infergate::agent {
namespace {

using infergate::testing::refused;

TEST(ParseMaps, ReadsFileBackedAnonymousSpecialAndDeletedMappings) {
  auto maps = parse_maps(
      "55d0c0a00000-55d0c0a22000 r--p 00000000 fe:00 10953287                   /usr/local/bin/infer gate\n"
      "7f0c8351c000-7f0c8351f000 rw-p 00000000 00:00 0 \n"
      "7ffc1b9e5000-7ffc1b9e7000 r-xp 00000000 00:00 0                          [vdso]\n"
      "7f0c8351f000-7f0c83545000 r--p 00000000 fe:00 332835                     /lib/libc.so.6 (deleted)\n");
  ASSERT_TRUE(maps.ok()) << maps.error().to_string();
  ASSERT_EQ(maps->size(), 4u);
  EXPECT_EQ((*maps)[0].start, 0x55d0c0a00000u);
  EXPECT_EQ((*maps)[0].end, 0x55d0c0a22000u);
  EXPECT_EQ((*maps)[0].path, "/usr/local/bin/infer gate");
  EXPECT_EQ((*maps)[1].path, "");
  EXPECT_EQ((*maps)[2].path, "[vdso]");
  EXPECT_EQ((*maps)[3].path, "/lib/libc.so.6");
  EXPECT_TRUE((*maps)[3].deleted);
  EXPECT_FALSE((*maps)[0].deleted);
}

TEST(ParseMaps, RefusesAMalformedLineNamingIt) {
  auto maps = parse_maps("7f00-7f10 r--p 0 fe:00 1 /a\nnot a maps line\n");
  ASSERT_FALSE(maps.ok());
  EXPECT_NE(maps.error().message().find("line 2"), std::string::npos) << maps.error().message();
  EXPECT_TRUE(refused(parse_maps("7f10-7f00 r--p 0 fe:00 1 /a\n"), "", {"maps line 1 is malformed"}))
      << "end before start";
  EXPECT_TRUE(refused(parse_maps("7f00-7fzz r--p 0 fe:00 1 /a\n"), "", {"maps line 1 is malformed"}));
}

TEST(LooksLikeSharedObject, KnowsLibraryAndLoaderNames) {
  for (const char* yes : {"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
                          "/usr/lib/libfoo.so", "/usr/lib/libstdc++.so.6.0.30", "/agent/lib/ld.so"}) {
    EXPECT_TRUE(looks_like_shared_object(yes)) << yes;
  }
  for (const char* no : {"", "[vdso]", "/dev/zero", "/models/model.so.bak", "/models/weights.safetensors",
                         "/usr/lib/locale/locale-archive", "/lib/.so", "/lib/libfoo.so.", "libc.so.6"}) {
    EXPECT_FALSE(looks_like_shared_object(no)) << no;
  }
}

TEST(ReadElfInfo, FindsThisProgramsInterpreter) {
  auto exe = read_file("/proc/self/exe", 1u << 30);
  ASSERT_TRUE(exe.ok());
  auto info = read_elf_info(*exe, "/proc/self/exe");
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  ASSERT_TRUE(info->interpreter.has_value());
  EXPECT_TRUE(std::filesystem::exists(*info->interpreter)) << *info->interpreter;
  EXPECT_FALSE(info->soname.has_value()) << "an executable has no SONAME";
}

TEST(ReadElfInfo, FindsALibrarysSoname) {
  auto maps = parse_maps(*read_file("/proc/self/maps"));
  ASSERT_TRUE(maps.ok());
  std::string libc;
  for (const auto& m : *maps) {
    if (m.path.ends_with("/libc.so.6")) libc = m.path;
  }
  ASSERT_FALSE(libc.empty()) << "libc is mapped";
  auto info = read_elf_info(*read_file(libc, 1u << 30), libc);
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  EXPECT_EQ(info->soname, "libc.so.6");
}

TEST(ReadElfInfo, RefusesWhatIsNotAnElfOfThisProcess) {
  std::string exe = *read_file("/proc/self/exe", 1u << 30);
  EXPECT_TRUE(refused(read_elf_info("#!/bin/sh\n", "script"), "", {"script: not an ELF file"}));
  EXPECT_TRUE(refused(read_elf_info(exe.substr(0, 20), "truncated"), "", {"truncated: not an ELF file"}))
      << "shorter than the ELF header";

  std::string other_class = exe;
  other_class[EI_CLASS] = other_class[EI_CLASS] == ELFCLASS64 ? ELFCLASS32 : ELFCLASS64;
  auto e = read_elf_info(other_class, "other-class");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("other-class"), std::string::npos);

  std::string far_phdrs = exe;
  ElfW(Ehdr) eh;
  std::memcpy(&eh, far_phdrs.data(), sizeof eh);
  eh.e_phoff = exe.size();
  std::memcpy(far_phdrs.data(), &eh, sizeof eh);
  e = read_elf_info(far_phdrs, "far-phdrs");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("outside the file"), std::string::npos) << e.error().message();
}

}  // namespace
}  // namespace infergate::agent
