// What weft throws. Arguments that cannot work (null or misaligned pointers, a row count above the
// op's maximum, shapes the ranks disagree on) are std::invalid_argument, thrown before anything is
// launched. Everything that goes wrong once work is on the device is a weft::Error:
//   CudaError           a CUDA, cuBLAS or NCCL call failed (the call, where, the error, a hint);
//   DeviceWaitTimeout   a wait on the device gave up (which signal, which value, which rank): the
//                       call it belonged to produced wrong numbers and is reported at the next point
//                       the host learns its fate (the op's next run, finish or check);
//   CallTimeout         a call did not finish within WEFT_COLLECTIVE_TIMEOUT_S: the communicator was
//                       aborted and the waits of the call released, so the process is not stuck;
//   CommunicatorAborted a call on a communicator that an earlier failure aborted.
#pragma once

#include <stdexcept>
#include <string>

namespace weft {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CudaError : public Error {
 public:
  using Error::Error;
};

class DeviceWaitTimeout : public Error {
 public:
  using Error::Error;
};

class CallTimeout : public Error {
 public:
  using Error::Error;
};

class CommunicatorAborted : public Error {
 public:
  using Error::Error;
};

}  // namespace weft
