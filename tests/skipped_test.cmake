# weft_skipped_test(NAME REASON): a test that stands for a part of the test command this build cannot
# run, so that ctest's summary lists it as skipped with the reason instead of leaving it out unseen.
function(weft_skipped_test name reason)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -E echo "weft: skipped: ${reason}")
  set_tests_properties(${name} PROPERTIES LABELS cpu SKIP_REGULAR_EXPRESSION "weft: skipped: ")
  message(STATUS "weft: ${name} is registered as skipped: ${reason}")
endfunction()
