// trainscopectl: the cluster view in a terminal (`status`), where a task is stuck (`stacks`), the
// incidents and what they cost (`incidents`, `incident`, its bundle), and fault injection into a
// task started with --enable_fault_injection (`fault`). Thin: flags -> one function -> exit code.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "grpcpp/grpcpp.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/grpc_tls.h"
#include "trainscope/common/http_client.h"
#include "trainscope/common/secret_file.h"
#include "trainscope/common/tls_flags.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/incident_bundle.h"
#include "trainscope/sidecar/incident_text.h"
#include "trainscope/sidecar/names.h"
#include "trainscope/sidecar/tar_gz.h"
#include "trainscope/sidecar/task_view.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace {

using trainscope::sidecar::TaskState;
using trainscope::sidecar::TaskView;

const char* Colour(TaskState s) {
  switch (s) {
    case TaskState::kUp:
      return "\033[32m";
    case TaskState::kDone:
      return "\033[36m";
    case TaskState::kSlow:
    case TaskState::kStalled:
    case TaskState::kBlocked:
      return "\033[33m";
    default:
      return "\033[31m";
  }
}

std::string Ago(double since) {
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  double s = std::max(0.0, now - since);
  char buf[32];
  if (s < 120) {
    std::snprintf(buf, sizeof(buf), "%.0fs", s);
  } else if (s < 7200) {
    std::snprintf(buf, sizeof(buf), "%.0fm", s / 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1fh", s / 3600);
  }
  return buf;
}

// Lines about the nodes that are not simply alive, and the partitions: one line each.
void PrintNodesAndPartitions(const trainscope::sidecar::pb::TaskList& list) {
  for (const auto& n : list.nodes()) {
    if (n.status() == "alive" && n.reason().empty()) continue;
    std::string name = n.hostname().empty() ? n.node() : n.hostname() + " (" + n.node() + ")";
    std::string tasks;
    for (const std::string& t : n.tasks()) tasks += (tasks.empty() ? "" : ", ") + t;
    std::printf("NODE %s %s%s%s%s\n", name.c_str(), n.status().c_str(),
                n.reason().empty() ? "" : (": " + n.reason()).c_str(),
                tasks.empty() ? "" : "; tasks: ", tasks.c_str());
  }
  for (const auto& p : list.partitions()) {
    std::printf("PARTITION %s (%s) cannot reach %s (%s) for %s: %s%s\n", p.a().c_str(),
                p.a_node().c_str(), p.b().c_str(), p.b_node().c_str(), Ago(p.since()).c_str(),
                p.error().c_str(),
                p.nodes_cut() ? "; the two nodes' sidecars cannot reach each other either" : "");
  }
}

// "https://host:port" or "http://host:port" as well as "host:port" -> host:port, and the TLS
// files to use (https or a --tls_* flag: TLS).
trainscope::TlsFiles SidecarAddress(std::string* sidecar, const trainscope::TlsFiles& tls) {
  bool https = tls.enabled();
  for (const char* scheme : {"https://", "http://"}) {
    if (sidecar->rfind(scheme, 0) == 0) {
      https = https || scheme[4] == 's';
      *sidecar = sidecar->substr(std::strlen(scheme));
    }
  }
  if (!sidecar->empty() && sidecar->back() == '/') sidecar->pop_back();
  trainscope::TlsFiles use = tls;
  if (https && !use.enabled()) use.ca_file = "/etc/ssl/certs/ca-certificates.crt";
  return use;
}

// Exit codes: 0 every task up or done, 1 some task in another state, 2 the sidecar cannot be
// asked.
int Status(std::string sidecar, bool json, const trainscope::TlsFiles& tls) {
  namespace ts = trainscope::sidecar;
  const trainscope::TlsFiles use = SidecarAddress(&sidecar, tls);
  auto resp = trainscope::HttpGet(sidecar, std::string(ts::names::kPathTasks), 3000, 8 << 20, use);
  if (!resp.ok()) {
    std::cerr << "trainscopectl: cannot ask the sidecar at " << sidecar << ": "
              << resp.status().message() << "\n";
    return 2;
  }
  if (resp->status != 200) {
    std::cerr << "trainscopectl: sidecar at " << sidecar << " answered HTTP " << resp->status
              << "\n";
    return 2;
  }
  if (json) std::cout << resp->body << "\n";
  auto list = ts::ParseTaskListJson(resp->body);
  if (!list.ok()) {
    std::cerr << "trainscopectl: the sidecar at " << sidecar
              << " sent something else than a task list: " << list.status().message() << "\n";
    return 2;
  }
  std::vector<TaskView> views;
  int skipped = 0;
  for (const auto& t : list->tasks()) {
    auto v = ts::FromProto(t);
    if (v.ok()) {
      views.push_back(*std::move(v));
    } else {
      ++skipped;
    }
  }
  ts::SortForPeople(views);
  int problems = 0;
  for (const TaskView& v : views) problems += !ts::IsHealthy(v.state);
  if (json) return problems ? 1 : 0;
  if (list->api_version() < ts::kApiVersion) {
    std::printf(
        "note: the sidecar at %s is older than this trainscopectl (API version %d, this one "
        "reads %d): it shows no nodes or partitions; upgrade it\n",
        sidecar.c_str(), list->api_version(), ts::kApiVersion);
  }
  if (list->isolated()) {
    std::printf(
        "THIS NODE (%s) IS CUT OFF from every other node: what it says of other nodes is "
        "not current\n",
        list->node().c_str());
  }
  PrintNodesAndPartitions(*list);
  bool tty = isatty(STDOUT_FILENO);
  std::printf("%-12s %-12s %-6s %-22s %s\n", "TASK", "STATE", "SINCE", "ADDRESS", "REASON");
  for (const TaskView& v : views) {
    std::string state(ts::StateName(v.state));
    std::printf("%-12s %s%-12s%s %-6s %-22s %s\n", v.task.ShortName().c_str(),
                tty ? Colour(v.state) : "", state.c_str(), tty ? "\033[0m" : "",
                Ago(v.since).c_str(), v.address.c_str(), v.reason.c_str());
  }
  std::printf("%zu task(s), %d need attention%s\n", views.size(), problems,
              skipped ? (", " + std::to_string(skipped) + " not understood").c_str() : "");
  return problems ? 1 : 0;
}

// The header that carries the token in `token_file` ("" = none): false, saying why, when the
// file cannot be read or is empty. The token itself is never printed.
bool AuthorizationHeader(const std::string& token_file, std::vector<std::string>* headers) {
  if (token_file.empty()) return true;
  auto text = trainscope::ReadSecretFile("--api_token_file", token_file, 4096 + 2);
  if (!text.ok()) {
    std::cerr << "trainscopectl: " << text.status().message() << "\n";
    return false;
  }
  std::string token = *std::move(text);
  token.erase(0, token.find_first_not_of(" \t\r\n"));
  token.erase(token.find_last_not_of(" \t\r\n") + 1);
  if (token.empty() || token.find_first_of(" \t\r\n") != std::string::npos) {
    std::cerr << "trainscopectl: --api_token_file " << token_file
              << " holds no token (one line, as the sidecar's --api_token_file)\n";
    return false;
  }
  headers->push_back("Authorization: Bearer " + token);
  return true;
}

// The snapshots of a task's threads, like eu-stack: exit 0 with at least one snapshot, 1 with
// none kept, 2 when the sidecar cannot be asked or refuses (an unknown task, one that exited, no
// credential for a fresh one).
int Stacks(const std::string& task, std::string sidecar, bool fresh, bool json,
           const trainscope::TlsFiles& tls, const std::string& token_file) {
  namespace ts = trainscope::sidecar;
  const trainscope::TlsFiles use = SidecarAddress(&sidecar, tls);
  std::string path = std::string(ts::names::kPathStacks) + "?task=" + task;
  if (fresh) path += "&fresh=1";
  std::vector<std::string> headers;
  if (!AuthorizationHeader(token_file, &headers)) return 2;
  auto resp = trainscope::HttpGet(sidecar, path, fresh ? 20000 : 5000, 16 << 20, use, headers);
  if (!resp.ok()) {
    std::cerr << "trainscopectl: cannot ask the sidecar at " << sidecar << ": "
              << resp.status().message() << "\n";
    return 2;
  }
  if (resp->status != 200) {
    std::cerr << "trainscopectl: " << resp->body;
    return 2;
  }
  auto list = ts::ParseStackListJson(resp->body);
  if (!list.ok()) {
    std::cerr << "trainscopectl: the sidecar at " << sidecar
              << " sent no snapshots: " << list.status().message() << "\n";
    return 2;
  }
  if (json) {
    std::cout << resp->body << "\n";
  } else {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::cout << ts::StacksToText(*list, now);
  }
  return list->snapshots_size() > 0 ? 0 : 1;
}

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The incidents as a table, the job's goodput under it. Exit codes: 0 none open, 1 some open, 2
// the sidecar cannot be asked or answers something that is not an incident list.
int Incidents(std::string sidecar, int limit, bool json, const trainscope::TlsFiles& tls) {
  namespace ts = trainscope::sidecar;
  const trainscope::TlsFiles use = SidecarAddress(&sidecar, tls);
  std::string path(ts::names::kPathIncidents);
  if (limit >= 0) path += "?limit=" + std::to_string(limit);
  auto resp = trainscope::HttpGet(sidecar, path, 5000, 32 << 20, use);
  if (!resp.ok()) {
    std::cerr << "trainscopectl: cannot ask the sidecar at " << sidecar << ": "
              << resp.status().message() << "\n";
    return 2;
  }
  if (resp->status != 200) {
    std::cerr << "trainscopectl: sidecar at " << sidecar << " answered HTTP " << resp->status
              << " to " << path
              << (resp->status == 404 ? " (a sidecar older than this trainscopectl?)" : "") << "\n";
    return 2;
  }
  auto list = ts::ParseIncidentListJson(resp->body);
  if (!list.ok()) {
    std::cerr << "trainscopectl: the sidecar at " << sidecar
              << " sent something else than an incident list: " << list.status().message() << "\n";
    return 2;
  }
  int open = 0;
  for (const auto& in : list->incidents()) open += in.open();
  if (json) {
    std::cout << resp->body << "\n";
  } else {
    std::cout << ts::IncidentsTable(*list, NowUnix());
  }
  return open ? 1 : 0;
}

// One incident in full, or its bundle written to `bundle`. Exit codes: 0 shown or written, 1 the
// sidecar holds no such incident or the bundle cannot be written, 2 the sidecar cannot be asked.
int Incident(const std::string& id, std::string sidecar, const std::string& bundle, bool force,
             bool json, const trainscope::TlsFiles& tls) {
  namespace ts = trainscope::sidecar;
  const trainscope::TlsFiles use = SidecarAddress(&sidecar, tls);
  if (!bundle.empty()) {
    // Before asking anything: a bundle that cannot be written is not worth gathering.
    absl::Status writable = ts::CheckWritable(bundle, force);
    if (!writable.ok()) {
      std::cerr << "trainscopectl: cannot write the bundle to " << bundle << ": "
                << writable.message()
                << (absl::IsAlreadyExists(writable) ? " (--force overwrites it)" : "") << "\n";
      return 1;
    }
  }
  const ts::SidecarGet get = [&](const std::string& path, int timeout_ms) {
    return trainscope::HttpGet(sidecar, path, timeout_ms, 64 << 20, use);
  };
  auto incident = ts::FetchIncident(get, id);
  if (!incident.ok()) {
    const absl::Status& st = incident.status();
    if (!ts::IsIncidentId(id)) {
      std::cerr << "trainscopectl: " << st.message() << "\n";
      return 1;
    }
    if (absl::IsNotFound(st)) {
      std::cerr << "trainscopectl: sidecar at " << sidecar << ": " << st.message() << "\n";
      return 1;
    }
    if (absl::IsInvalidArgument(st)) {
      std::cerr << "trainscopectl: the sidecar at " << sidecar
                << " sent something else than the incident: " << st.message() << "\n";
      return 2;
    }
    std::cerr << "trainscopectl: cannot ask the sidecar at " << sidecar << ": " << st.message()
              << "\n";
    return 2;
  }
  const double now = NowUnix();
  if (bundle.empty()) {
    std::cout << (json ? ts::ApiJson(*incident) + "\n" : ts::IncidentText(*incident, now));
    return 0;
  }
  const std::vector<ts::TarFile> files =
      ts::GatherBundle(get, *incident, {sidecar, "trainscopectl " TRAINSCOPE_VERSION, now});
  auto gz = ts::TarGz(files, static_cast<int64_t>(now));
  absl::Status written = gz.ok() ? ts::WriteFileWhole(bundle, *gz, force) : gz.status();
  if (!written.ok()) {
    std::cerr << "trainscopectl: cannot write the bundle to " << bundle << ": " << written.message()
              << "\n";
    return 1;
  }
  std::cout << "wrote " << bundle << " (" << files.size() << " files, "
            << trainscope::HumanBytes(static_cast<int64_t>(gz->size()))
            << "; README.txt says what each is and what could not be gathered):\n";
  for (const ts::TarFile& f : files) {
    std::cout << "  " << f.name << " ("
              << trainscope::HumanBytes(static_cast<int64_t>(f.data.size())) << ")\n";
  }
  return 0;
}

// " link_delay_ms=ps:1=80,..." when links are delayed.
std::string LinkWords(const trainscope::v1::InjectFaultResponse& resp) {
  std::map<std::string, int64_t> links(resp.link_delay_ms().begin(), resp.link_delay_ms().end());
  std::string out;
  for (const auto& [peer, ms] : links) {
    out += (out.empty() ? " link_delay_ms=" : ",") + peer + "=" + std::to_string(ms);
  }
  return out;
}

int Fault(const std::string& task, const trainscope::v1::InjectFaultRequest& req,
          const trainscope::TlsFiles& tls) {
  auto credentials = trainscope::MakeChannelCredentials(tls);
  if (!credentials.ok()) {
    std::cerr << "trainscopectl: " << credentials.status().message() << "\n";
    return 2;
  }
  auto channel = grpc::CreateChannel(task, *credentials);
  auto stub = trainscope::v1::TaskService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  trainscope::v1::InjectFaultResponse resp;
  grpc::Status s = stub->InjectFault(&ctx, req, &resp);
  if (!s.ok()) {
    std::cerr << "trainscopectl: InjectFault on " << task << " failed: " << s.error_message()
              << (s.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
                          s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                          s.error_code() == grpc::StatusCode::PERMISSION_DENIED
                      ? " (was the task started with --enable_fault_injection?)"
                      : "")
              << "\n";
    return 1;
  }
  std::cout << task << ": parameter_delay_ms=" << resp.parameter_delay_ms()
            << " heartbeat_delay_ms=" << resp.heartbeat_delay_ms() << LinkWords(resp)
            << (req.deadlock_training() ? " deadlock_training armed" : "")
            << (req.block_parameter_service() ? " block_parameter_service armed" : "") << "\n";
  return 0;
}

// What the flags of every subcommand fill in.
struct CtlFlags {
  std::string sidecar = "127.0.0.1:9400";
  bool json = false;
  std::string task;
  int64_t parameter_delay_ms = 0;
  int64_t heartbeat_delay_ms = 0;
  bool deadlock_training = false;
  bool block_parameter_service = false;
  std::vector<std::string> link_delays;  // "ps:1=80"
  std::string stacks_task;
  bool fresh = false;
  std::string token_file;
  int limit = -1;
  std::string incident_id;
  std::string bundle;
  bool force = false;
};

// The `status` subcommand and its flags.
CLI::App* AddStatusCommand(CLI::App& app, CtlFlags& f) {
  auto* status = app.add_subcommand(
      "status",
      "The cluster view as a table, problems first; exit 1 when a task is neither up nor done");
  status
      ->add_option("--sidecar", f.sidecar,
                   "HOST:PORT of a sidecar's HTTP port, or https://HOST:PORT (a sidecar started "
                   "with --tls_cert_file; verified against --tls_ca_file, else the system's CAs)")
      ->capture_default_str();
  status->add_flag("--json", f.json, "Print the sidecar's JSON instead of a table");
  return status;
}

// The `fault` subcommand and its flags.
CLI::App* AddFaultCommand(CLI::App& app, CtlFlags& f) {
  auto* fault = app.add_subcommand(
      "fault", "Set delays on a task started with --enable_fault_injection (0 clears)");
  fault->add_option("--task", f.task, "HOST:PORT of the task's gRPC address")->required();
  fault
      ->add_option("--parameter_delay_ms", f.parameter_delay_ms,
                   "Delay added to every ParameterService call")
      ->capture_default_str();
  fault
      ->add_option("--heartbeat_delay_ms", f.heartbeat_delay_ms,
                   "Delay added to every Heartbeat answer")
      ->capture_default_str();
  fault->add_option("--link_delay_ms", f.link_delays,
                    "PEER=MS: a slow link; the task delays its own calls to PEER (e.g. ps:1=80) "
                    "by MS, every other peer as before (repeatable)");
  fault->add_flag("--deadlock_training", f.deadlock_training,
                  "Wedge: the training thread's next parameter call deadlocks with a second "
                  "thread on two mutexes (a worker; restart the task to undo)");
  fault->add_flag("--block_parameter_service", f.block_parameter_service,
                  "Wedge: the next ParameterService call blocks forever and every later one waits "
                  "behind it (a ps; restart the task to undo)");
  return fault;
}

// The `stacks` subcommand and its flags; --api_token_file defaults to
// $TRAINSCOPE_API_TOKEN_FILE.
CLI::App* AddStacksCommand(CLI::App& app, CtlFlags& f) {
  auto* stacks = app.add_subcommand(
      "stacks",
      "Where a task is stuck: every thread's state and stack (innermost frame first) and the "
      "calls in flight, from the snapshots its node's sidecar took when it turned hung, stalled "
      "or blocked; any node's sidecar answers for any task");
  stacks->add_option("task", f.stacks_task, "The task, e.g. worker:0")->required();
  stacks->add_option("--sidecar", f.sidecar, "HOST:PORT of a sidecar's HTTP port (or https://)")
      ->capture_default_str();
  stacks->add_flag("--fresh", f.fresh,
                   "Take a snapshot now first (needs the sidecar's token: --api_token_file, or "
                   "a client certificate over mutual TLS)");
  if (const char* env = std::getenv("TRAINSCOPE_API_TOKEN_FILE")) f.token_file = env;
  stacks->add_option("--api_token_file", f.token_file,
                     "File holding the sidecar's API token (its --api_token_file), sent as "
                     "Authorization: Bearer (default: $TRAINSCOPE_API_TOKEN_FILE)");
  stacks->add_flag("--json", f.json, "Print the sidecar's JSON");
  return stacks;
}

// The `incidents` subcommand and its flags.
CLI::App* AddIncidentsCommand(CLI::App& app, CtlFlags& f) {
  auto* incidents = app.add_subcommand(
      "incidents",
      "The incidents, one per root cause (open first, then the closed, newest first), with what "
      "each cost and the job's goodput; exit 1 when one is open");
  incidents->add_option("--sidecar", f.sidecar, "HOST:PORT of a sidecar's HTTP port (or https://)")
      ->capture_default_str();
  incidents->add_option("--limit", f.limit, "At most N incidents (the sidecar's default: 100)")
      ->check(CLI::Range(0, 1000));
  incidents->add_flag("--json", f.json, "Print the sidecar's JSON instead of a table");
  return incidents;
}

// The `incident` subcommand and its flags.
CLI::App* AddIncidentCommand(CLI::App& app, CtlFlags& f) {
  auto* incident = app.add_subcommand(
      "incident",
      "One incident in full (cause, affected tasks, timeline, evidence), or with --bundle a "
      ".tar.gz of it, its tasks' stacks, the ps requests of its window and the tasks");
  incident->add_option("id", f.incident_id, "The incident's id, e.g. inc-3f2a9c0d1e4b")->required();
  incident->add_option("--sidecar", f.sidecar, "HOST:PORT of a sidecar's HTTP port (or https://)")
      ->capture_default_str();
  incident->add_option("--bundle", f.bundle,
                       "Write the bundle to FILE.tar.gz (whole or not at all; README.txt in it "
                       "says what each file is)");
  incident->add_flag("--force", f.force, "Overwrite the --bundle file if it exists");
  incident->add_flag("--json", f.json, "Print the incident's JSON (with its snapshots)");
  return incident;
}

// The InjectFault request the `fault` flags ask for; exits 2 with a clear message on a bad
// --link_delay_ms.
trainscope::v1::InjectFaultRequest FaultRequest(const CtlFlags& f) {
  trainscope::v1::InjectFaultRequest req;
  req.set_parameter_delay_ms(f.parameter_delay_ms);
  req.set_heartbeat_delay_ms(f.heartbeat_delay_ms);
  req.set_deadlock_training(f.deadlock_training);
  req.set_block_parameter_service(f.block_parameter_service);
  for (const std::string& link : f.link_delays) {
    const size_t eq = link.rfind('=');
    int64_t ms = -1;
    if (eq == std::string::npos || eq == 0 ||
        !absl::SimpleAtoi(absl::string_view(link).substr(eq + 1), &ms) || ms < 0) {
      std::cerr << "trainscopectl: --link_delay_ms " << link
                << ": expected PEER=MS with MS >= 0, e.g. --link_delay_ms ps:1=80\n";
      std::exit(2);
    }
    (*req.mutable_link_delay_ms())[link.substr(0, eq)] = ms;
  }
  return req;
}

}  // namespace

int main(int argc, char** argv) {
  // A server that refuses our TLS handshake (no client certificate) closes before we write:
  // that is an error to report, not a reason to die of SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{
      "trainscopectl: ask a trainscope sidecar about the cluster and its incidents, or inject "
      "faults."};
  app.set_version_flag("--version", "trainscopectl " TRAINSCOPE_VERSION);
  app.require_subcommand(1);
  CtlFlags f;
  auto* status = AddStatusCommand(app, f);
  auto* fault = AddFaultCommand(app, f);
  auto* stacks = AddStacksCommand(app, f);
  auto* incidents = AddIncidentsCommand(app, f);
  auto* incident = AddIncidentCommand(app, f);
  trainscope::TlsFiles tls;
  trainscope::AddTlsFlags(app, tls);
  // The --tls_* flags may also follow the subcommand.
  status->fallthrough();
  fault->fallthrough();
  stacks->fallthrough();
  incidents->fallthrough();
  incident->fallthrough();
  CLI11_PARSE(app, argc, argv);
  if (status->parsed()) return Status(f.sidecar, f.json, tls);
  if (stacks->parsed()) return Stacks(f.stacks_task, f.sidecar, f.fresh, f.json, tls, f.token_file);
  if (incidents->parsed()) return Incidents(f.sidecar, f.limit, f.json, tls);
  if (incident->parsed()) {
    return Incident(f.incident_id, f.sidecar, f.bundle, f.force, f.json, tls);
  }
  return Fault(f.task, FaultRequest(f), tls);
}
