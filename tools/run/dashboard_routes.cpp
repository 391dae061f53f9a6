#include "tools/run/dashboard_routes.hpp"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <optional>

#include "common/error.hpp"
#include "tools/dashboard/page.hpp"
#include "tools/run/job_view.hpp"

namespace tandem::run {
namespace {

constexpr std::uint64_t kChunkBytes = 4u << 20;  // bounds one answer however long the run was
constexpr const char* kJsonType = "application/json";

// Whole lines of `file` from byte `from`, at most kChunkBytes. A line longer than a chunk is skipped
// (no writer of ours writes one), so that a client always makes progress.
nlohmann::ordered_json chunk(const std::filesystem::path& file, std::uint64_t from) {
  std::error_code ec;
  std::uint64_t size = std::filesystem::file_size(file, ec);
  if (ec) size = 0;  // not written yet
  std::string text;
  std::uint64_t next = std::min(from, size);
  if (from < size) {
    std::ifstream in(file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(from));
    text.resize(std::min(kChunkBytes, size - from));
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    const auto end = text.rfind('\n');
    if (end != std::string::npos) {
      text.resize(end + 1);
      next = from + text.size();
    } else {
      next = text.size() == kChunkBytes ? from + text.size() : from;  // too long: skipped; else still being written
      text.clear();
    }
  }
  return {{"text", std::move(text)}, {"next", next}, {"size", size}};
}

// "metrics=12&eval=0" -> the value of `key`; 0 when absent, nullopt when not a number.
std::optional<std::uint64_t> query_offset(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (!pair.starts_with(key) || pair.size() <= key.size() || pair[key.size()] != '=') continue;
    const std::string_view value = pair.substr(key.size() + 1);
    std::uint64_t v = 0;
    const auto [end, err] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (err != std::errc() || end != value.data() + value.size()) return std::nullopt;
    return v;
  }
  return 0;
}

HttpAnswer json_answer(const nlohmann::ordered_json& j) {
  // A file's bytes that are not UTF-8 are replaced rather than failing the answer.
  return {kJsonType, j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n"};
}

}  // namespace

HttpRoutes dashboard_routes(const std::filesystem::path& run_dir, const shm::ControlBlock* live) {
  HttpRoutes routes;
  auto page = [](std::string_view) { return HttpAnswer{"text/html; charset=utf-8", std::string(dashboard::page())}; };
  routes["/"] = page;
  routes["/dashboard"] = page;
  if (live)
    routes["/metrics"] = [live](std::string_view) {
      return HttpAnswer{"text/plain; version=0.0.4; charset=utf-8", prometheus_text(*live)};
    };
  routes["/api/state"] = [live, run_dir](std::string_view) {
    if (live) {
      auto j = status_json(*live);
      j["live"] = true;
      return json_answer(j);
    }
    return json_answer({{"live", false}, {"run_dir", run_dir.string()}});
  };
  routes["/api/history"] = [live, run_dir](std::string_view query) {
    const auto metrics_from = query_offset(query, "metrics");
    const auto eval_from = query_offset(query, "eval");
    if (!metrics_from || !eval_from)
      return HttpAnswer{"text/plain; charset=utf-8", "bad request: offsets are byte counts, e.g. ?metrics=0&eval=0\n",
                        400};
    return json_answer({{"live", live != nullptr},
                        {"job", live ? nlohmann::ordered_json(live->job()) : nullptr},
                        {"run_dir", run_dir.string()},
                        {"metrics", chunk(run_dir / "metrics.jsonl", *metrics_from)},
                        {"eval", chunk(run_dir / "eval.jsonl", *eval_from)}});
  };
  return routes;
}

std::string announce_dashboard(const std::filesystem::path& run_dir, std::uint16_t port) {
  const std::string url = fmt::format("http://127.0.0.1:{}/", port);
  std::ofstream out(run_dir / "dashboard.url", std::ios::trunc);
  out << url << '\n';
  if (!out) fail("cannot write {}: check the permissions of run.runs_dir", (run_dir / "dashboard.url").string());
  return fmt::format("dashboard on {} (Prometheus: {}metrics)", url, url);
}

}  // namespace tandem::run
