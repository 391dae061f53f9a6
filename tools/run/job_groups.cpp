#include "tools/run/job_groups.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/process.hpp"

namespace tandem::run {
namespace {

std::vector<std::string> split_args(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

bool executable(const std::filesystem::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

std::filesystem::path self_dir() {
  try {
    return self_exe().parent_path();
  } catch (const std::filesystem::filesystem_error&) {  // no /proc: bare names are looked up on PATH only
    return {};
  }
}

// A path is used as given; a bare name is looked for next to the tandem binary, then on PATH.
// `what` names the setting in the error ("run.learner_program", "run.group \"logger\": command[0]").
std::filesystem::path resolve_program(const std::string& what, const std::string& value) {
  if (value.empty()) fail("config: {} is empty: set it to the program to run", what);
  if (value.find('/') != std::string::npos) {
    std::filesystem::path p = std::filesystem::absolute(value);
    if (!executable(p)) fail("config: {} = \"{}\" is not an executable file: build it or fix the path", what, value);
    return p;
  }
  const auto here = self_dir();
  std::vector<std::filesystem::path> candidates;
  if (!here.empty()) {
    candidates.push_back(here / value);
    // In a build tree the programs sit in sibling folders: build/tools/tandem, build/learner/tandem-learner.
    candidates.push_back(here.parent_path() / "learner" / value);
    candidates.push_back(here.parent_path() / "actor" / value);
  }
  if (const char* path = std::getenv("PATH")) {
    std::istringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');)
      if (!dir.empty()) candidates.push_back(std::filesystem::path(dir) / value);
  }
  for (const auto& c : candidates)
    if (executable(c)) return c;
  fail("config: {} = \"{}\" was found neither next to {} nor on PATH: install it, or give its path", what, value,
       here.empty() ? std::string("the tandem binary") : here.string());
}

// A command run by a Python interpreter: its script (the first argument not an option) must exist,
// else the interpreter's own "can't open file" would surface only as a crash loop.
void check_python_script(const std::string& what, const std::filesystem::path& program,
                         const std::vector<std::string>& args) {
  if (!program.filename().string().starts_with("python")) return;
  for (const auto& a : args) {
    if (a == "-m" || a == "-c") return;  // a module or inline code: nothing to check here
    if (a.starts_with("-")) continue;
    if (a.find('{') != std::string::npos) return;  // a placeholder: known only at spawn
    if (!std::filesystem::is_regular_file(a))
      fail("config: {}: the Python script \"{}\" does not exist (from {}): fix the path in command", what, a,
           std::filesystem::current_path().string());
    return;
  }
}

ProgramSpec command_of(const std::string& what, const toml::node* node) {
  const toml::array* argv = node != nullptr ? node->as_array() : nullptr;
  if (argv == nullptr || argv->empty())
    fail(
        "config: {}: command must be a non-empty list of strings, e.g. command = [\"/usr/bin/python3\", "
        "\"actor.py\"]",
        what);
  std::vector<std::string> words;
  for (const auto& w : *argv) {
    if (!w.is_string())
      fail("config: {}: command must be a list of strings; quote every word, e.g. [\"python3\", \"a.py\", \"3\"]",
           what);
    words.push_back(w.as_string()->get());
  }
  ProgramSpec spec{resolve_program(what + ": command[0]", words.front()), {words.begin() + 1, words.end()}};
  check_python_script(what, spec.path, spec.args);
  return spec;
}

// Each table's keys, checked here: an unknown one is refused by name, as the schema does elsewhere.
void check_keys(const std::string& what, const toml::table& t, std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : t)
    if (std::find(known.begin(), known.end(), k.str()) == known.end()) {
      std::string list;
      for (auto key : known) list += (list.empty() ? "" : ", ") + std::string(key);
      fail("config: {}: unknown key '{}' (known: {})", what, k.str(), list);
    }
}

bool heartbeat_of(const std::string& what, const toml::table& t) {
  const toml::node* n = t.get("heartbeat");
  if (n == nullptr) return true;
  if (!n->is_boolean())
    fail("config: {}: heartbeat must be true (it joins with tandem.job()) or false (exit status only)", what);
  return n->as_boolean()->get();
}

std::string name_of(const toml::table& t, std::size_t at) {
  const toml::node* n = t.get("name");
  const std::string what = fmt::format("run.group #{}", at + 1);
  if (n == nullptr || !n->is_string()) fail("config: {}: give it a name, e.g. name = \"logger\"", what);
  std::string name = n->as_string()->get();
  // Plain ASCII, not the locale's idea of a letter: the name becomes part of row names and labels.
  const auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  const bool ok = !name.empty() && name.size() <= shm::kGroupNameBytes && lower(name[0]) &&
                  std::all_of(name.begin(), name.end(),
                              [&](char c) { return lower(c) || digit(c) || c == '_' || c == '-'; });
  if (!ok)
    fail("config: {}: name \"{}\" is not a group name: use 1-{} of a-z, 0-9, '_', '-', starting with a letter", what,
         name, shm::kGroupNameBytes);
  if (name == "learner" || name == "actor")
    fail("config: run.group \"{0}\": the name is the built-in {0} group's: choose another, or use run.{0}s", name);
  return name;
}

ProgramGroup user_group(const toml::node& node, std::size_t at) {
  const toml::table* t = node.as_table();
  if (t == nullptr)
    fail("config: run.group #{} is not a table: write it as [[run.group]] with name, count, command", at + 1);
  ProgramGroup g;
  g.name = name_of(*t, at);
  const std::string what = fmt::format("run.group \"{}\"", g.name);
  check_keys(what, *t, {"name", "role", "count", "command", "heartbeat"});
  if (const toml::node* role = t->get("role")) {
    const std::string r = role->is_string() ? role->as_string()->get() : std::string("?");
    if (r == "learner")
      fail("config: {}: role = \"learner\": a job has one learner group: give its command in [run.learner]", what);
    if (r != "actor") fail("config: {}: role = \"{}\" is not a role: use \"actor\"", what, r);
  }
  const toml::node* count = t->get("count");
  if (count == nullptr) g.count = 1;
  else if (!count->is_integer() || count->as_integer()->get() < 0 || count->as_integer()->get() > shm::kMaxActors)
    fail("config: {}: count must be an integer in [0, {}]", what, shm::kMaxActors);
  else g.count = static_cast<std::uint32_t>(count->as_integer()->get());
  g.program = command_of(what, t->get("command"));
  g.heartbeat = heartbeat_of(what, *t);
  return g;
}

}  // namespace

GroupTables group_tables(const toml::table& document) {
  GroupTables out;
  if (const toml::node* n = document.at_path(kLearnerTable).node()) {
    if (!n->is_table()) fail("config: run.learner must be a table: write [run.learner] with command = [...]");
    out.learner = *n->as_table();
  }
  if (const toml::node* n = document.at_path(kGroupTable).node()) {
    if (!n->is_array_of_tables() && !(n->is_array() && n->as_array()->empty()))
      fail("config: run.group must be an array of tables: write each group as [[run.group]]");
    out.groups = *n->as_array();
  }
  return out;
}

std::vector<ProgramGroup> program_groups(const GroupTables& tables, const LegacyPrograms& legacy) {
  std::vector<ProgramGroup> groups;
  ProgramGroup learner{
      .name = "learner", .role = shm::Role::learner, .count = legacy.learners, .builtin = !tables.learner};
  if (tables.learner) {
    check_keys("run.learner", *tables.learner, {"command", "heartbeat"});
    if (legacy.learner_program != "tandem-learner" || !legacy.learner_args.empty())
      fail(
          "config: run.learner.command and run.learner_program/run.learner_args both name the learner: keep "
          "run.learner.command");
    learner.program = command_of("run.learner", tables.learner->get("command"));
    learner.heartbeat = heartbeat_of("run.learner", *tables.learner);
  } else {
    learner.program = {resolve_program("run.learner_program", legacy.learner_program), split_args(legacy.learner_args)};
  }
  groups.push_back(std::move(learner));
  std::uint32_t next = 0;
  if (legacy.actors > 0) {
    groups.push_back(
        {.name = "actor",
         .role = shm::Role::actor,
         .count = legacy.actors,
         .program = {resolve_program("run.actor_program", legacy.actor_program), split_args(legacy.actor_args)},
         .builtin = true});
    next = legacy.actors;
  }
  if (tables.groups) {
    for (std::size_t i = 0; i < tables.groups->size(); ++i) {
      ProgramGroup g = user_group(*tables.groups->get(i), i);
      if (std::any_of(groups.begin(), groups.end(), [&](const auto& o) { return o.name == g.name; }))
        fail("config: run.group \"{}\" is given twice: give each group its own name", g.name);
      g.first_index = next;
      next += g.count;
      if (next > shm::kMaxActors)
        fail("config: run.actors and the groups' counts add up to {} actors, more than {}: lower a count", next,
             shm::kMaxActors);
      groups.push_back(std::move(g));
    }
  }
  return groups;
}

void apply_group_overrides(GroupTables& tables, std::span<const std::string> overrides) {
  const std::string learner_prefix = fmt::format("{}.", kLearnerTable);
  const std::string group_prefix = fmt::format("{}.", kGroupTable);
  for (const auto& assignment : overrides) {
    const auto eq = assignment.find('=');
    if (eq == std::string::npos) continue;  // Config::parse has refused it
    const std::string key = assignment.substr(0, eq);
    if (key == kLearnerTable || key == kGroupTable)
      fail(
          "--set {}: set one key of the table, e.g. --set run.group.logger.count=2 or --set run.learner.heartbeat=false",
          assignment);
    toml::table* target = nullptr;
    std::string field;
    if (key.starts_with(learner_prefix)) {
      if (!tables.learner) tables.learner.emplace();
      target = &*tables.learner;
      field = key.substr(learner_prefix.size());
    } else if (key.starts_with(group_prefix)) {
      const std::string rest = key.substr(group_prefix.size());
      const auto dot = rest.find('.');
      if (dot == std::string::npos || dot == 0 || dot + 1 == rest.size())
        fail("--set {}: name the group and its key, e.g. --set run.group.logger.count=2", assignment);
      const std::string name = rest.substr(0, dot);
      field = rest.substr(dot + 1);
      std::vector<std::string> names;
      if (tables.groups) {
        for (auto& node : *tables.groups) {
          toml::table* t = node.as_table();
          if (t == nullptr) continue;  // program_groups names it
          const std::string group = (*t)["name"].value_or(std::string{});
          if (group == name) target = t;
          names.push_back(group);
        }
      }
      if (target == nullptr)
        fail("--set {}: no [[run.group]] is named \"{}\" (the config's groups: {}); add the group to the config",
             assignment, name, names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")));
    } else {
      continue;  // a schema key: Config::parse applied it
    }
    toml::table parsed = parse_value_literal(std::string_view(assignment).substr(eq + 1), "--set");
    parsed.get("v")->visit([&](const auto& value) { target->insert_or_assign(field, value); });
  }
}

void put_group_tables(const GroupTables& tables, toml::table& run_table) {
  if (tables.learner) run_table.insert_or_assign("learner", *tables.learner);
  if (tables.groups) run_table.insert_or_assign("group", *tables.groups);
}

std::string group_table(const ProgramGroup& group) {
  if (group.role == shm::Role::learner) return group.builtin ? "run.learner_program" : "[run.learner]";
  return group.builtin ? "run.actor_program" : fmt::format("run.group \"{}\"", group.name);
}

std::string_view program_groups_doc() {
  return R"(
# Program groups: your own programs beside (or instead of) the built-in ones. The learner is
# run.learners ranks of one command (torchrun's nproc_per_node; each rank gets RANK, LOCAL_RANK,
# WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GROUP_RANK); the built-in actors are group
# "actor" (run.actors of run.actor_program); each [[run.group]] adds `count` processes of `command`
# after them. Every process gets TANDEM_JOB, TANDEM_ROLE, TANDEM_INDEX (its control-block index),
# TANDEM_GROUP, TANDEM_GROUP_INDEX (0..count-1), TANDEM_GROUP_SIZE, TANDEM_RUN_DIR, TANDEM_CONFIG;
# command words may use {config}, {run_dir}, {job} and {index} (the place in the group).
# heartbeat = true: the program joins with `with tandem.job() as job:` (Python) and gets heartbeat
# and hang checks (run.start_timeout_s, run.heartbeat_timeout_s) and a graceful stop (job.should_stop);
# heartbeat = false: it never joins, is supervised by its exit status only, and is stopped by SIGTERM.
# Restarts, backoff and failure rules are the same for every group (see run.max_restarts).
#
# [run.learner]
# command = ["/usr/bin/python3", "train.py", "--config", "{config}"]   # default: run.learner_program
# heartbeat = true
#
# [[run.group]]
# name = "logger"          # 1-15 of a-z 0-9 _ -, starting with a letter; shown as logger.0, logger.1, ...
# role = "actor"           # the only role of a group
# count = 1                # [0, 4096]
# command = ["/usr/bin/python3", "examples/python/logger.py"]
# heartbeat = true
)";
}

}  // namespace tandem::run
