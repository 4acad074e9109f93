# Helpers that give every module the same compile flags, include root and test wiring.
#
#   deepinfer_library(NAME SRCS ... [DEPS ...] [PRIVATE_DEPS ...])
#     -> target deepinfer_<NAME>, alias deepinfer::<NAME>; include root is src/.
#   deepinfer_test(NAME SRCS ... [DEPS ...] [LABELS ...])
#     -> gtest executable build/bin/<NAME>, tests registered with CTest.
#   deepinfer_bench(NAME SRCS ... [DEPS ...])  -> Google Benchmark executable in build/bin/.

set(DEEPINFER_WARNINGS -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wimplicit-fallthrough)

function(deepinfer_apply_flags target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DEEPINFER_WARNINGS}>)
  if(DEEPINFER_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(DEEPINFER_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer
      -fno-sanitize-recover=undefined>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(DEEPINFER_HAVE_CUDA)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:${DEEPINFER_CUDA_GENCODE} -lineinfo --expt-relaxed-constexpr>)
  endif()
endfunction()

function(deepinfer_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(deepinfer_${name} STATIC ${ARG_SRCS})
  add_library(deepinfer::${name} ALIAS deepinfer_${name})
  target_include_directories(deepinfer_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(deepinfer_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  deepinfer_apply_flags(deepinfer_${name})
endfunction()

function(deepinfer_test name)
  if(NOT DEEPINFER_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(${name} PRIVATE
    DEEPINFER_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    DEEPINFER_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared")
  deepinfer_apply_flags(${name})
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 120 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()

function(deepinfer_bench name)
  if(NOT DEEPINFER_BUILD_BENCH)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  deepinfer_apply_flags(${name})
endfunction()
