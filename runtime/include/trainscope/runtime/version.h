#pragma once
// The versions a task announces in its handshake. CreateSession refuses a peer whose protocol
// version differs; the runtime version is shown to the user for diagnosis.

namespace trainscope {

inline constexpr char kRuntimeVersion[] = "0.1.0";
// Bump when a wire change is one that older peers cannot understand.
inline constexpr int kProtocolVersion = 1;

}  // namespace trainscope
