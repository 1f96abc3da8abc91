#pragma once
// The cluster view: this node's first-hand views merged with every other node's record from
// the exchange, then read as a whole. It says which nodes are cut off (the other side sees a
// silent node once, not N task failures; the cut-off node sees itself), which pairs of live
// tasks cannot reach each other (a partition: the held-up task names it as its reason, neither
// side is called dead or hung), what a blocked task's peers really are (dead, missing, listening
// elsewhere), and why a task nobody reports on is unknown. Pure functions over values.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/exchange_core.h"
#include "trainscope/sidecar/node_load.h"
#include "trainscope/sidecar/task_view.h"
#include "trainscope/sidecar/worker_ps_map.h"

namespace trainscope::sidecar {

// A node of the cluster (a sidecar and the tasks it watches), as this sidecar sees it.
struct NodeInfo {
  std::string id;
  std::string hostname;
  // alive, suspect, silent (cut off), down (its sidecar refuses connections), left, unknown
  // (never answered); "isolated" for this node when it is cut off.
  std::string status;
  double since = 0;  // Unix seconds.
  std::vector<TaskRef> tasks;
  std::string reason;
  bool self = false;
};

struct PartitionInfo {
  TaskRef a;  // The task that fails to reach b.
  TaskRef b;  // Alive for its own sidecar.
  std::string a_node, b_node, a_address, b_address;
  double since = 0;
  std::string error;
  bool nodes_cut = false;  // The two nodes' sidecars cannot reach each other directly either.
};

// An open incident as the node that owns it names it (its record's OwnedIncident): the book
// takes its id for the same cause (incidents.h).
struct PeerIncident {
  std::string node;  // The owner.
  std::string id;
  std::string cause_kind, cause_a, cause_b;  // The book's CauseKey.
  double started = 0;                        // Unix seconds.
};

struct ClusterView {
  std::string cluster;
  std::vector<TaskView> tasks;  // The whole cluster, problems first.
  std::vector<NodeInfo> nodes;  // This node first.
  std::vector<PartitionInfo> partitions;
  WorkerPsMap worker_ps;                  // Every worker-to-ps edge reported, and the slow links.
  std::optional<double> isolated_since;   // This node is cut off from every other, since then.
  bool exchange_unauthenticated = false;  // Its exchange runs without a cluster key.
  std::string exchange_closed;            // Why it has no exchange though it has peers.
  std::vector<TaskRef> local;             // The tasks this node watches first-hand.
  std::vector<PeerIncident> peer_incidents;  // The others' own open incidents, from their records.
  std::string self;
  std::string self_hostname;
};

struct ClusterViewInputs {
  std::string cluster;
  const ClusterSpec* spec = nullptr;
  std::vector<TaskView> local;  // First-hand views of this node's tasks.
  // What the exchange knows; null when this sidecar has no peers.
  std::shared_ptr<const ExchangeSnapshot> exchange;
  std::string self;  // This node's id and host name.
  std::string self_hostname;
  bool has_peers = false;
  // Why the exchange is closed though the spec has other nodes ("" = not closed): no cluster
  // key and no mutual TLS. The other nodes' tasks are then unwatched here, and say why.
  std::string exchange_closed;
  // The id of the node expected to watch each task (from its host in the spec), for the reason
  // of a task nobody reports on; a task not in it: unknown.
  std::shared_ptr<const std::map<TaskRef, std::string>> expected_nodes;
  double now_unix = 0;
  bool worker_ps_map = true;  // false: no map and no slow links (SidecarOptions).
  NodeLoad node_load;         // This node's (the others' come in their records).
  // The newest snapshot of each local task (the keeper's). With it, a stuck local task's reason
  // also says where it is stuck (ExplainedLocal); null: the reasons as the tracker gave them.
  std::shared_ptr<const NewestStacks> stacks;
};

ClusterView BuildClusterView(const ClusterViewInputs& in);

// `in.local`, each stuck task's reason saying where it is stuck (ExplainStuckTasks), from
// `in.stacks` and its peers' states in a view built first without the explanations. As
// `in.local` when nothing is stuck or there are no stacks. What the exchange sends of this node.
std::vector<TaskView> ExplainedLocal(const ClusterViewInputs& in);

// The API form: every task (or, with `local_only`, this node's), the nodes and partitions.
pb::TaskList ToTaskList(const std::string& cluster, const ClusterView& view, bool local_only);

// Appends to each blocked task's reason what `views` knows of the peers it waits on.
void AnnotateBlocked(std::vector<TaskView>& views, const ClusterSpec& spec);

// True when a peer's last error says the network failed (connection lost, no route, connect
// timed out), not the peer: partition evidence. An answer that came too late is not.
bool IsNetworkError(absl::string_view error);

// True when two host:port addresses name the same place as far as a watcher can tell
// (wildcard or loopback hosts compare by port).
bool SameAddress(const std::string& a, const std::string& b);

}  // namespace trainscope::sidecar
