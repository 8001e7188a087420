# Finds utf8proc (Debian: libutf8proc-dev), the Unicode database and normalisation behind the
# tokenizer, and defines the imported target utf8proc::utf8proc. pkg-config gives the search hints;
# the version comes from utf8proc.h (Debian 12's libutf8proc.pc says 2.6.0 for the 2.8.0 library).
# Utf8proc_USE_STATIC_LIBS: link libutf8proc.a (the GPU machine's portable binaries, which carry no
# shared library of ours).
#   Utf8proc_FOUND, Utf8proc_VERSION, Utf8proc_INCLUDE_DIR, Utf8proc_LIBRARY
include(FindPackageHandleStandardArgs)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_UTF8PROC QUIET libutf8proc)
endif()
find_path(Utf8proc_INCLUDE_DIR utf8proc.h HINTS ${PC_UTF8PROC_INCLUDEDIR} ${PC_UTF8PROC_INCLUDE_DIRS})
if(Utf8proc_USE_STATIC_LIBS)
  find_library(Utf8proc_LIBRARY NAMES libutf8proc.a HINTS ${PC_UTF8PROC_LIBDIR} ${PC_UTF8PROC_LIBRARY_DIRS})
else()
  find_library(Utf8proc_LIBRARY NAMES utf8proc HINTS ${PC_UTF8PROC_LIBDIR} ${PC_UTF8PROC_LIBRARY_DIRS})
endif()
if(Utf8proc_INCLUDE_DIR AND EXISTS ${Utf8proc_INCLUDE_DIR}/utf8proc.h)
  file(STRINGS ${Utf8proc_INCLUDE_DIR}/utf8proc.h version_lines
       REGEX "^#define UTF8PROC_VERSION_(MAJOR|MINOR|PATCH) [0-9]+")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define UTF8PROC_VERSION_${part} ([0-9]+).*" "\\1" v_${part} "${version_lines}")
  endforeach()
  set(Utf8proc_VERSION ${v_MAJOR}.${v_MINOR}.${v_PATCH})
endif()
find_package_handle_standard_args(Utf8proc
  REQUIRED_VARS Utf8proc_LIBRARY Utf8proc_INCLUDE_DIR
  VERSION_VAR Utf8proc_VERSION)
mark_as_advanced(Utf8proc_INCLUDE_DIR Utf8proc_LIBRARY)
if(Utf8proc_FOUND AND NOT TARGET utf8proc::utf8proc)
  add_library(utf8proc::utf8proc UNKNOWN IMPORTED)
  set_target_properties(utf8proc::utf8proc PROPERTIES
    IMPORTED_LOCATION ${Utf8proc_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${Utf8proc_INCLUDE_DIR})
endif()
