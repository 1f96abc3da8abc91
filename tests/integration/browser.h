#pragma once
// Pages as a browser shows them: load a URL in headless Chromium (Debian's `chromium`, which
// scripts/install-deps installs), take the DOM its scripts left, and read it: an element by id,
// its text, the rows and cells of a table. For tests of the sidecar's status page. Not
// thread-safe: one test thread.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope::testing {

// The path of the `chromium` program (/usr/bin/chromium, else found on PATH); "" when it is not
// installed.
std::string ChromiumPath();

// The DOM of `url` as Chromium serializes it (--dump-dom) once its scripts have run for
// `virtual_ms` of the page's (virtual) time: timers run fast, and virtual time waits while a
// fetch is pending, so a page that fetches its data on load shows it. Chromium runs headless as
// a Process with a throwaway profile and HOME (removed after), is given `timeout` in real time
// and is killed and waited for after it. FailedPrecondition when chromium is not installed
// (saying to run scripts/install-deps); Unavailable when it fails, DeadlineExceeded when it
// takes longer than `timeout`, each with its output.
absl::StatusOr<std::string> RenderInChromium(const std::string& url,
                                             std::chrono::milliseconds timeout,
                                             int virtual_ms = 5000);

// A rendered page's DOM, read by id. Chromium's serialization is well-formed (lower-case tags,
// attributes in double quotes, text escaped), which is all this reader relies on; the contents
// of <script> and <style> are dropped so that markup in their text is never taken for elements.
class Dom {
 public:
  explicit Dom(std::string_view html);
  // The element whose id is `id`, tags included; nullopt when there is none.
  std::optional<std::string> Element(std::string_view id) const;
  // Its text (TextOf); "" when there is no such element.
  std::string Text(std::string_view id) const;
  const std::string& html() const { return html_; }

 private:
  std::string html_;
};

// The outermost `tag` elements inside `html`, in order, tags included (the rows of a tbody, the
// cells of a row).
std::vector<std::string> Elements(std::string_view html, std::string_view tag);
// The text of `html`: tags dropped, entities decoded, runs of white space made one space,
// trimmed.
std::string TextOf(std::string_view html);
// The value of attribute `name` of the first `tag` element in `html`, entities decoded; nullopt
// when there is no such element or it has no such attribute.
std::optional<std::string> Attribute(std::string_view html, std::string_view tag,
                                     std::string_view name);

}  // namespace trainscope::testing
