// What `auto` chooses by when the caller says nothing: the machine profile and tuning table measured
// for weft on H200s (bench/machines/h200.json, bench/tuning/h200.json), compiled into the library so
// that a pip install chooses as the measurements say, not by the built-in figures alone.
//
//   PlanOptions o;
//   o.machine = default_machine_profile();   // WEFT_MACHINE_PROFILE=path overrides; "builtin": MachineProfile{}
//   o.tuning = default_tuning_table();       // WEFT_TUNING_TABLE=path overrides; "none": no table; none
//                                            // either where WEFT_MACHINE_PROFILE names another machine
//
// Both are read once per process; every rank of a job reads the same environment, and the op API's
// plan agreement check catches ranks that did not.
#pragma once

#include <memory>

#include "weft/model/machine_profile.hpp"
#include "weft/model/tuning_table.hpp"

namespace weft {

// The compiled-in profile and table as they are (no environment).
const MachineProfile& shipped_machine_profile();
const std::shared_ptr<const TuningTable>& shipped_tuning_table();

// The environment's choice, else the shipped one (see the header).
const MachineProfile& default_machine_profile();
std::shared_ptr<const TuningTable> default_tuning_table();

}  // namespace weft
