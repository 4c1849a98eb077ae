# `pip install .` from the source tree into a fresh folder (the build backend and nanobind come from
# PYTHONPATH: scripts/setup.sh puts them in .deps/python), then imports the installed package there,
# away from the build tree. The package builds against this build tree's libraries, installed into a
# prefix first (WEFT_PREBUILT_PREFIX), so that CI does not compile every kernel a second time; the pip
# build that compiles the library from source runs on the GPU machine (scripts/gpu_check.sh python).
# Arguments: PYTHON, SOURCE_DIR, BUILD_DIR, WORK_DIR.
file(REMOVE_RECURSE "${WORK_DIR}/site" "${WORK_DIR}/prefix")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix" RESULT_VARIABLE code OUTPUT_QUIET)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} failed (${code})")
endif()
execute_process(
  COMMAND "${PYTHON}" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps --target "${WORK_DIR}/site"
          --config-settings=build-dir=${WORK_DIR}/build --config-settings=cmake.define.WEFT_PREBUILT_PREFIX=${WORK_DIR}/prefix "${SOURCE_DIR}"
  RESULT_VARIABLE code)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "pip install of ${SOURCE_DIR} failed (${code})")
endif()
# The package carries weft's libraries beside the module (nothing is read from the prefix or the build tree).
foreach(expected weft/__init__.py weft/torch/ops.py weft/libweft.so weft/libweft_core.so)
  if(NOT EXISTS "${WORK_DIR}/site/${expected}")
    message(FATAL_ERROR "the installed package has no ${expected}")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK_DIR}/prefix")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH "${PYTHON}" -c
          "import sys; sys.path.insert(0, '${WORK_DIR}/site'); import weft, pathlib; assert pathlib.Path(weft.__file__).is_relative_to('${WORK_DIR}/site'), weft.__file__; print('installed weft', weft.__version__, 'with', len(weft.strategies()), 'strategies from', weft.__file__); import importlib.metadata as m; print('license:', m.metadata('weft', ).get('License'))"
  RESULT_VARIABLE code)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "the installed package does not import (${code})")
endif()
