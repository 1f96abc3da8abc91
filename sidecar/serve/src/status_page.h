#pragma once
// The human status page served at "/": self-contained HTML and JavaScript that fetches
// /api/v1/tasks every second and shows problems first, each with its reason, then the slow and
// failed ps requests (/api/v1/traces/slow, /api/v1/traces/errors) with their trace ids. Private.

#include <string_view>

namespace trainscope::sidecar {

std::string_view StatusPageHtml();

}  // namespace trainscope::sidecar
