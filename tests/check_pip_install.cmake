# `pip install .` from the source tree into a fresh folder (the build backend and nanobind come from
# PYTHONPATH: scripts/setup.sh puts them in .deps/python), then imports the installed package there,
# away from the build tree. Arguments: PYTHON, SOURCE_DIR, WORK_DIR.
file(REMOVE_RECURSE "${WORK_DIR}/site")
execute_process(
  COMMAND "${PYTHON}" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps --target "${WORK_DIR}/site"
          --config-settings=build-dir=${WORK_DIR}/build "${SOURCE_DIR}"
  RESULT_VARIABLE code)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "pip install of ${SOURCE_DIR} failed (${code})")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH "${PYTHON}" -c
          "import sys; sys.path.insert(0, '${WORK_DIR}/site'); import weft, pathlib; assert pathlib.Path(weft.__file__).is_relative_to('${WORK_DIR}/site'), weft.__file__; print('installed weft', weft.__version__, 'with', len(weft.strategies()), 'strategies from', weft.__file__); import importlib.metadata as m; print('license:', m.metadata('weft', ).get('License'))"
  RESULT_VARIABLE code)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "the installed package does not import (${code})")
endif()
