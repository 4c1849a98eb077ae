# Runs `weft ARGS` and requires exit code 2, within a bounded time, and a message matching EXPECT:
# bad input is one clear line and exit 2, never a crash, a hang or a silent run.
# Arguments: WEFT (the tool), ARGS (a ;-list), EXPECT (a regular expression, matched on stderr).
set(CODE 2)
set(STREAM stderr)
include(${CMAKE_CURRENT_LIST_DIR}/check_cli_exit.cmake)
