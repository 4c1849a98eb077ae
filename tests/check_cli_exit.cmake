# Runs `weft ARGS` and requires exit code CODE, within TIME_LIMIT seconds, and output matching
# EXPECT; output matching REJECT fails it. A test that only needs "it exited" or "it printed" cannot
# fail on the defects that matter (a run that printed and then failed, an error that exited 0).
# Arguments: WEFT (the tool), ARGS (a ;-list), CODE, EXPECT (a regular expression); optional:
# STREAM (stderr, the default, or stdout: where EXPECT must match), REJECT (a regular expression
# matched against both streams), TIME_LIMIT (seconds, 30).
if(NOT DEFINED STREAM)
  set(STREAM stderr)
endif()
if(NOT DEFINED TIME_LIMIT)
  set(TIME_LIMIT 30)
endif()
execute_process(COMMAND ${WEFT} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${TIME_LIMIT})
if(NOT code STREQUAL "${CODE}")
  message(FATAL_ERROR "weft ${ARGS}: exit ${code}, expected ${CODE}\nstdout: ${out}\nstderr: ${err}")
endif()
# Surrounding whitespace stripped: EXPECT may anchor a whole message with ^ and $.
if(STREAM STREQUAL "stdout")
  string(STRIP "${out}" checked)
elseif(STREAM STREQUAL "stderr")
  string(STRIP "${err}" checked)
else()
  message(FATAL_ERROR "check_cli_exit.cmake: STREAM is stdout or stderr, got '${STREAM}'")
endif()
if(NOT "${checked}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "weft ${ARGS}: the ${STREAM} does not match '${EXPECT}':\n${checked}")
endif()
if(DEFINED REJECT AND NOT REJECT STREQUAL "" AND "${out}${err}" MATCHES "${REJECT}")
  message(FATAL_ERROR "weft ${ARGS}: the output matches '${REJECT}' (${CMAKE_MATCH_0}):\nstdout: ${out}\nstderr: ${err}")
endif()
