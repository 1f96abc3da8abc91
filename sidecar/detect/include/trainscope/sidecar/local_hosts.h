#pragma once
// Which hosts of a cluster spec are this node: by default loopback addresses, "localhost", this
// host's name, or an address of a local interface; for a sidecar bound to one address, only that
// address (and names that resolve to it), so that several nodes can share a machine (network
// namespaces, 127.0.0.x). The sidecar watches the tasks whose host is this node.

#include <string>
#include <vector>

namespace trainscope::sidecar {

// Tells whether a host names this machine: loopback addresses, "localhost", this hostname, or an
// address of a local interface (names are resolved once, at construction and on first use).
// Not thread-safe; build it once at start-up.
class LocalHosts {
 public:
  // Reads the hostname and the addresses of the local interfaces.
  LocalHosts();
  // For tests: a fixed hostname and interface address list.
  LocalHosts(std::string hostname, std::vector<std::string> addresses);
  // This node is the one address `bound` (a sidecar started with --http_address ADDR).
  static LocalHosts Bound(std::string bound);

  bool IsLocal(const std::string& host) const;
  const std::string& hostname() const { return hostname_; }
  // The local interfaces' addresses (numeric), or the one bound address.
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  bool IsLocalAddress(const std::string& literal) const;

  std::string hostname_;
  std::vector<std::string> addresses_;
  bool strict_ = false;  // Only addresses_ count: no loopback, no hostname.
};

// Where a sidecar listens when --http_address is not given: the address each host of this
// node's tasks resolves to (IPv4 first), in order and once each, plus 127.0.0.1 (tasks send
// spans to 127.0.0.1:4317 by default, and trainscopectl asks 127.0.0.1:9400); "0.0.0.0" (every
// interface) when no host resolves. Resolves names: call at start-up.
std::vector<std::string> DefaultBindAddresses(const std::vector<std::string>& task_hosts);

}  // namespace trainscope::sidecar
