// Headless Chromium for tests, and a reader of the DOM it serializes; see browser.h.
#include "browser.h"

#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "process.h"

namespace trainscope::testing {
namespace {

// The last `n` bytes of a program's output, for an error message.
std::string Tail(const std::string& text, size_t n = 4000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

// A temporary directory, removed with all it holds when destroyed.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/trainscope-chromium-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One tag of serialized HTML: [begin, end) spans it from '<' to '>' inclusive.
struct Tag {
  size_t begin = 0;
  size_t end = 0;
  std::string name;  // Lower case; "" for a comment or a doctype.
  bool closing = false;
};

// The tag at or after `pos`; nullopt when there is none. Quotes are honoured, so a '>' in an
// attribute's value does not end its tag.
std::optional<Tag> NextTag(std::string_view html, size_t pos) {
  pos = html.find('<', pos);
  if (pos == std::string_view::npos) return std::nullopt;
  Tag tag;
  tag.begin = pos;
  if (html.substr(pos, 4) == "<!--") {
    const size_t close = html.find("-->", pos + 4);
    tag.end = close == std::string_view::npos ? html.size() : close + 3;
    return tag;
  }
  size_t i = pos + 1;
  if (i < html.size() && html[i] == '/') {
    tag.closing = true;
    ++i;
  }
  while (i < html.size() && (std::isalnum(static_cast<unsigned char>(html[i])) || html[i] == '-')) {
    tag.name += static_cast<char>(std::tolower(static_cast<unsigned char>(html[i])));
    ++i;
  }
  char quote = 0;
  for (; i < html.size(); ++i) {
    if (quote != 0) {
      if (html[i] == quote) quote = 0;
    } else if (html[i] == '"' || html[i] == '\'') {
      quote = html[i];
    } else if (html[i] == '>') {
      break;
    }
  }
  tag.end = std::min(i + 1, html.size());
  return tag;
}

bool IsVoid(const std::string& name) {
  static const std::set<std::string> kVoid = {"area",   "base",  "br",    "col",  "embed",
                                              "hr",     "img",   "input", "link", "meta",
                                              "source", "track", "wbr"};
  return kVoid.count(name) > 0;
}

// The end (one past its closing tag) of the element that `start` opens.
size_t ElementEnd(std::string_view html, const Tag& start) {
  if (IsVoid(start.name) || html.substr(start.begin, start.end - start.begin).ends_with("/>")) {
    return start.end;
  }
  int depth = 1;
  for (auto t = NextTag(html, start.end); t; t = NextTag(html, t->end)) {
    if (t->name != start.name) continue;
    depth += t->closing ? -1 : 1;
    if (depth == 0) return t->end;
  }
  return html.size();
}

std::string DecodeEntities(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t semi = s[i] == '&' ? s.find(';', i) : std::string_view::npos;
    if (semi == std::string_view::npos || semi - i > 10) {
      out += s[i];
      continue;
    }
    const std::string_view name = s.substr(i + 1, semi - i - 1);
    static const std::map<std::string_view, std::string_view> kNamed = {
        {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}, {"nbsp", " "}};
    if (auto it = kNamed.find(name); it != kNamed.end()) {
      out += it->second;
    } else if (name.size() > 1 && name[0] == '#') {
      const bool hex = name[1] == 'x' || name[1] == 'X';
      const unsigned long code =
          std::strtoul(std::string(name.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10);
      if (code < 0x80) {
        out += static_cast<char>(code);
      } else if (code < 0x800) {
        out += static_cast<char>(0xC0 | (code >> 6));
        out += static_cast<char>(0x80 | (code & 0x3F));
      } else if (code < 0x10000) {
        out += static_cast<char>(0xE0 | (code >> 12));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (code >> 18));
        out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code & 0x3F));
      }
    } else {
      out += s.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

// The attribute `name` of the start tag `tag` (its text from '<' to '>'), entities decoded.
std::optional<std::string> TagAttribute(std::string_view tag, std::string_view name) {
  size_t i = 1;
  while (i < tag.size() && !std::isspace(static_cast<unsigned char>(tag[i])) && tag[i] != '>') ++i;
  while (i < tag.size()) {
    while (i < tag.size() && (std::isspace(static_cast<unsigned char>(tag[i])) || tag[i] == '/')) {
      ++i;
    }
    const size_t key_begin = i;
    while (i < tag.size() && tag[i] != '=' && tag[i] != '>' &&
           !std::isspace(static_cast<unsigned char>(tag[i]))) {
      ++i;
    }
    if (i == key_begin) return std::nullopt;
    const std::string_view key = tag.substr(key_begin, i - key_begin);
    std::string_view value;
    if (i < tag.size() && tag[i] == '=') {
      ++i;
      const char quote = i < tag.size() && (tag[i] == '"' || tag[i] == '\'') ? tag[i] : 0;
      if (quote != 0) ++i;
      const size_t value_begin = i;
      while (i < tag.size() &&
             (quote != 0 ? tag[i] != quote
                         : !std::isspace(static_cast<unsigned char>(tag[i])) && tag[i] != '>')) {
        ++i;
      }
      value = tag.substr(value_begin, i - value_begin);
      if (quote != 0 && i < tag.size()) ++i;
    }
    if (key == name) return DecodeEntities(value);
  }
  return std::nullopt;
}

// Elements whose ends separate words in their text.
bool IsBlock(const std::string& name) {
  static const std::set<std::string> kBlock = {"br",     "div", "h1",   "h2",    "h3",      "h4",
                                               "header", "li",  "main", "p",     "section", "table",
                                               "tbody",  "td",  "th",   "thead", "tr",      "ul"};
  return kBlock.count(name) > 0;
}

}  // namespace

std::string ChromiumPath() {
  if (access("/usr/bin/chromium", X_OK) == 0) return "/usr/bin/chromium";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path == nullptr ? "" : path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/chromium";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::StatusOr<std::string> RenderInChromium(const std::string& url,
                                             std::chrono::milliseconds timeout, int virtual_ms) {
  const std::string chromium = ChromiumPath();
  if (chromium.empty()) {
    return absl::FailedPreconditionError(
        "chromium is not installed: run scripts/install-deps (it installs Debian's chromium "
        "package), then run this test again");
  }
  TempDir dir;
  if (dir.path().empty()) return absl::InternalError("cannot make a temporary directory in /tmp");
  const std::string dom_path = dir.path() + "/dom.html";
  std::optional<int> code;
  std::string output;
  {
    // Its stdout (the DOM) to a file of its own, apart from its log on stderr.
    Process browser(
        "/bin/sh",
        {"-c", "exec \"$0\" \"$@\" >\"$TRAINSCOPE_DOM_FILE\"", chromium, "--headless=new",
         // Run as root (CI, containers) Chromium starts only without its sandbox;
         // the page is our own.
         "--no-sandbox", "--disable-gpu",
         // Containers give /dev/shm 64 MiB, too little for it: /tmp instead.
         "--disable-dev-shm-usage", "--no-first-run", "--user-data-dir=" + dir.path() + "/profile",
         absl::StrCat("--virtual-time-budget=", virtual_ms), "--dump-dom", url},
        {{"HOME", dir.path()}, {"TRAINSCOPE_DOM_FILE", dom_path}});
    code = browser.Wait(timeout);
    output = browser.Output();
    // Leaving this scope kills it (SIGKILL) and waits for it when it is still running.
  }
  if (!code) {
    return absl::DeadlineExceededError(
        absl::StrCat("chromium did not render ", url, " within ",
                     std::chrono::duration_cast<std::chrono::seconds>(timeout).count(),
                     " s; its output:\n", Tail(output)));
  }
  std::ifstream in(dom_path);
  std::stringstream dom;
  dom << in.rdbuf();
  if (*code != 0 || dom.str().empty()) {
    return absl::UnavailableError(absl::StrCat("chromium exited with status ", *code,
                                               " and a DOM of ", dom.str().size(), " bytes for ",
                                               url, "; its output:\n", Tail(output)));
  }
  return dom.str();
}

Dom::Dom(std::string_view html) {
  html_.reserve(html.size());
  size_t copied = 0;
  for (auto t = NextTag(html, 0); t; t = NextTag(html, t->end)) {
    if (t->closing || (t->name != "script" && t->name != "style")) continue;
    // Raw text up to its closing tag, which that text cannot hold.
    const size_t close = html.find("</" + t->name, t->end);
    html_ += html.substr(copied, t->end - copied);
    copied = close == std::string_view::npos ? html.size() : close;
    t->end = copied;
  }
  html_ += html.substr(copied);
}

std::optional<std::string> Dom::Element(std::string_view id) const {
  const std::string_view html = html_;
  for (auto t = NextTag(html, 0); t; t = NextTag(html, t->end)) {
    if (t->closing || t->name.empty()) continue;
    if (TagAttribute(html.substr(t->begin, t->end - t->begin), "id") == id) {
      return std::string(html.substr(t->begin, ElementEnd(html, *t) - t->begin));
    }
  }
  return std::nullopt;
}

std::string Dom::Text(std::string_view id) const {
  const std::optional<std::string> element = Element(id);
  return element ? TextOf(*element) : "";
}

std::vector<std::string> Elements(std::string_view html, std::string_view tag) {
  std::vector<std::string> out;
  for (auto t = NextTag(html, 0); t; t = NextTag(html, t->end)) {
    if (t->closing || t->name != tag) continue;
    const size_t end = ElementEnd(html, *t);
    out.emplace_back(html.substr(t->begin, end - t->begin));
    t->end = end;  // Outermost only: go on after it.
  }
  return out;
}

std::string TextOf(std::string_view html) {
  std::string raw;
  size_t pos = 0;
  for (auto t = NextTag(html, 0); t; t = NextTag(html, t->end)) {
    raw += DecodeEntities(html.substr(pos, t->begin - pos));
    if (IsBlock(t->name)) raw += ' ';
    pos = t->end;
  }
  raw += DecodeEntities(html.substr(std::min(pos, html.size())));
  std::string out;
  for (char c : raw) {
    const bool space = std::isspace(static_cast<unsigned char>(c));
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::optional<std::string> Attribute(std::string_view html, std::string_view tag,
                                     std::string_view name) {
  for (auto t = NextTag(html, 0); t; t = NextTag(html, t->end)) {
    if (!t->closing && t->name == tag) {
      return TagAttribute(html.substr(t->begin, t->end - t->begin), name);
    }
  }
  return std::nullopt;
}

}  // namespace trainscope::testing
