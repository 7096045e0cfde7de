// What the runtime's buffer pool may not look at itself: the Python object of a tensor it handed out.
#pragma once

namespace trident::bindings {

// Installs result_object_state() as the pool's check (runtime::ReusePool::set_object_check).
void install_result_object_check();

}  // namespace trident::bindings
