# One place for the warning flags every weft target uses.
add_library(weft_warnings INTERFACE)
target_compile_options(weft_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>)
