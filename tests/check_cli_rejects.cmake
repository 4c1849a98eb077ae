# Runs `weft ARGS` and requires exit code 2, within a bounded time, and a message matching EXPECT:
# bad input is one clear line and exit 2, never a crash, a hang or a silent run.
# Arguments: WEFT (the tool), ARGS (a ;-list), EXPECT (a regular expression).
execute_process(COMMAND ${WEFT} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 30)
if(NOT code STREQUAL "2")
  message(FATAL_ERROR "weft ${ARGS}: exit ${code}, expected 2\nstdout: ${out}\nstderr: ${err}")
endif()
if(NOT "${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "weft ${ARGS}: the message does not match '${EXPECT}':\n${err}")
endif()
