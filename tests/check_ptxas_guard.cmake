# cmake/ptxas_guard.sh around a fake compiler (a shell line that prints a ptxas message, writes its
# -o file and exits with a status): the guard must fail a compile whose ptxas serialised WGMMAs
# (C7514) or injected WGMMA waits (C7517) and remove its object, pass any other message through,
# and return a failing compiler's own status. GUARD: the script; WORK: a scratch directory.
file(MAKE_DIRECTORY "${WORK}")
set(object "${WORK}/kernel.o")
function(compile message status)
  file(REMOVE "${object}")
  execute_process(COMMAND bash "${GUARD}" bash -c "echo \"${message}\" >&2; touch \"$2\"; exit ${status}" fake_nvcc -o "${object}"
                  RESULT_VARIABLE code ERROR_VARIABLE err TIMEOUT 30)
  set(code "${code}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

foreach(message
    "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized"
    "ptxas info    : (C7517) warpgroup.wait is injected in around line 5933 by compiler")
  compile("${message}" 0)
  if(code EQUAL 0)
    message(FATAL_ERROR "the guard passed a compile whose ptxas said '${message}'")
  endif()
  if(EXISTS "${object}")
    message(FATAL_ERROR "the guard left the object of a compile it failed ('${message}')")
  endif()
  if(NOT err MATCHES "weft: ptxas serialised WGMMAs .*kernel\\.o" OR NOT err MATCHES "C751[47]")
    message(FATAL_ERROR "the guard's message does not name the object and keep ptxas's line:\n${err}")
  endif()
endforeach()

compile("ptxas info    : Used 168 registers, used 16 barriers" 0)
if(NOT code EQUAL 0 OR NOT EXISTS "${object}")
  message(FATAL_ERROR "the guard failed an ordinary compile (exit ${code}):\n${err}")
endif()
if(NOT err MATCHES "Used 168 registers")
  message(FATAL_ERROR "the guard swallowed the compiler's messages:\n${err}")
endif()

compile("error: something" 3)
if(NOT code EQUAL 3)
  message(FATAL_ERROR "the guard turned a compiler's exit 3 into ${code}")
endif()
