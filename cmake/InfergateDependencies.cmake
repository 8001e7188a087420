# Third-party libraries, all from Debian packages (scripts/install-deps.sh installs them).
include_guard(GLOBAL)

find_package(Threads REQUIRED)
if(INFERGATE_GPU_PORTABLE)
  # libcrypto.a (SHA-256 for hash-while-load): the GPU machine has no OpenSSL 3 of ours.
  set(OPENSSL_USE_STATIC_LIBS TRUE)
endif()
find_package(OpenSSL 3 REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
# utf8proc: the tokenizer's Unicode classes and NFC. 2.8 is Unicode 15.0, the version of the tests' oracle
# (python3-regex in Debian 12): the classes are tested equal to it on every code point.
# The portable GPU build links the runtime's model library, so it takes the static archive.
set(Utf8proc_USE_STATIC_LIBS ${INFERGATE_GPU_PORTABLE})
find_package(Utf8proc 2.8 REQUIRED)
if(INFERGATE_BUILD_TESTS OR INFERGATE_GPU_PORTABLE)
  find_package(GTest REQUIRED)
endif()
if(INFERGATE_BUILD_BENCH OR INFERGATE_GPU_PORTABLE)
  find_package(benchmark REQUIRED)
endif()

if(NOT INFERGATE_GPU_PORTABLE)
  find_package(CLI11 REQUIRED)
  find_package(yaml-cpp REQUIRED)
  find_package(cpprestsdk REQUIRED)
  find_package(prometheus-cpp REQUIRED)  # Debian's has no version file: ask for none
  find_package(ZLIB REQUIRED)
  # Debian's cpprestsdk target does not carry its OpenSSL link ("DSO missing from command line").
  add_library(infergate_cpprest INTERFACE)
  target_link_libraries(infergate_cpprest INTERFACE cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto
                                                    Threads::Threads)
  add_library(infergate::cpprest ALIAS infergate_cpprest)
endif()
