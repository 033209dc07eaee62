// The HTML training report: charts drawn from metrics.jsonl; a malformed line names file:line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "train/report.h"

using namespace lt;
namespace fs = std::filesystem;

TEST(TrainReport, DrawsTheCurvesFromMetrics) {
  fs::path d = fs::temp_directory_path() / ("lt_report_test_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  {
    std::ofstream f(d / "metrics.jsonl");
    f << R"({"step":0,"eval_loss":4.0,"eval_ppl":54.6})" << "\n";
    for (int s = 1; s <= 5; ++s)
      f << "{\"step\":" << s << ",\"loss\":" << 4.0 - 0.3 * s << ",\"lr\":0.001,\"tokens_per_s\":100,\"rss_bytes\":1048576}\n";
    f << R"({"step":5,"eval_loss":2.5,"eval_ppl":12.2})" << "\n";
  }
  std::string path = write_training_report(d.string());
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  std::string html = ss.str();
  EXPECT_NE(html.find("eval loss 4.0000 &rarr; 2.5000"), std::string::npos);
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  EXPECT_EQ(svgs, 4u);
  EXPECT_NE(html.find("<polyline"), std::string::npos);
  {
    std::ofstream f(d / "metrics.jsonl", std::ios::app);
    f << "{not json\n";
  }
  try {
    write_training_report(d.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:8"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}
