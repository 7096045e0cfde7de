// What the runtime's buffer pool may not look at itself: the Python object of a tensor it handed out.
#pragma once

namespace trident::bindings {

// Installs result_object_state() as the pool's check (runtime::ReusePool::set_object_check).
void install_result_object_check();

// True while this thread runs a program that released the GIL (scm_call.cpp: run_spec); the
// check then takes the GIL for itself, and otherwise relies on the caller's.
inline thread_local bool t_running_without_gil = false;

}  // namespace trident::bindings
