#pragma once
// The flags of trainscope-sidecar, each writing into SidecarOptions (CLI11; only main.cc and
// flags.cc include it, as it is heavy).

#include "trainscope/sidecar/sidecar.h"

namespace CLI {
class App;
}  // namespace CLI

namespace trainscope::sidecar {

// Adds every flag of the sidecar but --version and --check_config to `app`, after taking the
// defaults some have in the environment ($TRAINSCOPE_CLUSTER, $TF_CONFIG,
// $TRAINSCOPE_OTLP_UPSTREAM, $TRAINSCOPE_ALERTMANAGER_URL).
void AddSidecarFlags(CLI::App& app, SidecarOptions& o);

}  // namespace trainscope::sidecar
