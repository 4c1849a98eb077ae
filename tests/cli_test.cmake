# weft_cli_test(NAME CODE STREAM EXPECT REJECT TIME_LIMIT ARGS...): `weft ARGS` must exit CODE, its
# STREAM (stdout or stderr) match EXPECT and neither stream match REJECT (empty: nothing rejected);
# tests/check_cli_exit.cmake runs it. Unlike PASS_REGULAR_EXPRESSION, the exit code counts too.
set(_weft_check_exit ${CMAKE_CURRENT_LIST_DIR}/check_cli_exit.cmake)

function(weft_cli_test name code stream expect reject time_limit)
  list(JOIN ARGN ";" args)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} "-DWEFT=$<TARGET_FILE:weft_tool>" "-DARGS=${args}" "-DCODE=${code}" "-DSTREAM=${stream}"
                                "-DEXPECT=${expect}" "-DREJECT=${reject}" "-DTIME_LIMIT=${time_limit}" -P ${_weft_check_exit})
endfunction()

