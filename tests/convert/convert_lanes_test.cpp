// Shards written at once (--jobs) and the read-back thread: the output must
// not depend on how many shards are written together, and a failure on any
// thread — a lane's writer, its producer, the read-back of a finished shard
// — must come out as that failure's own clear error with nothing left on
// disk. The failures are injected through ConvertOptions::after_shard_written
// (which runs on the lane's thread between writing a shard and reading it
// back) and ShardPipelineOptions::stop.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "convert/convert.h"
#include "convert/shard_pipeline.h"
#include "convert_test_util.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

using namespace convert_test;
namespace fs = std::filesystem;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

ConvertOptions stock_to_nvfp4(const std::string& dst, int jobs) {
  ConvertOptions opt;
  opt.src = fixture("checkpoints/dsv4_stock");
  opt.dst = dst;
  opt.target = Format::nvfp4;
  opt.jobs = jobs;
  return opt;
}

// Flips one byte of a safetensors file's data section, in place (the page
// cache sees it at once, as a bad write would leave it).
void corrupt_data_byte(const std::string& path, uint64_t into_data) {
  const std::string bytes = read_file(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  const uint64_t at = 8 + n + into_data;
  ASSERT_LT(at, bytes.size());
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const char flipped = char(bytes[at] ^ 0x10);
  ASSERT_EQ(::pwrite(fd, &flipped, 1, off_t(at)), 1);
  ::close(fd);
}

// Runs the conversion and returns its error message ("" if it succeeded).
std::string convert_error(const ConvertOptions& opt) {
  try {
    convert_checkpoint(opt);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ConvertLanes, OutputIsTheSameWhateverTheNumberOfJobs) {
  TempDir dir;
  std::map<std::string, std::string> first;
  for (int jobs : {1, 2, 3}) {
    const std::string out = dir.str("out" + std::to_string(jobs));
    ConvertReport r = convert_checkpoint(stock_to_nvfp4(out, jobs));
    EXPECT_EQ(r.shards, 2);
    auto snap = snapshot(out);
    ASSERT_FALSE(snap.empty());
    if (jobs == 1) first = snap;
    else EXPECT_TRUE(snap == first) << "--jobs " << jobs << " wrote different files than --jobs 1";
  }
}

TEST(ConvertLanes, TheReadBackCatchesAShardChangedOnDiskAndNothingIsLeft) {
  for (int jobs : {1, 2}) {
    for (const char* victim : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
      TempDir dir;
      ConvertOptions opt = stock_to_nvfp4(dir.str("out"), jobs);
      opt.after_shard_written = [&](const std::string& path) {
        if (fs::path(path).filename() == victim) corrupt_data_byte(path, 100);
      };
      const std::string err = convert_error(opt);
      EXPECT_TRUE(has(err, victim)) << err;
      EXPECT_TRUE(has(err, "read back differs")) << err;
      EXPECT_FALSE(has(err, "another shard failed")) << err;
      EXPECT_EQ(list_dir(dir.str()), std::vector<std::string>{}) << "jobs " << jobs << ", " << victim;
    }
  }
}

TEST(ConvertLanes, AFailureInOneLaneIsTheErrorReportedAndNothingIsLeft) {
  for (int jobs : {1, 2}) {
    TempDir dir;
    fs::create_directory(dir.str("out"));
    write_file(dir.str("out/old.txt"), "old");  // a forced conversion must leave it as it was
    ConvertOptions opt = stock_to_nvfp4(dir.str("out"), jobs);
    opt.force = true;
    opt.after_shard_written = [](const std::string& path) {
      if (fs::path(path).filename() == "model-00002-of-00002.safetensors") fail("injected failure at ", path);
    };
    const std::string err = convert_error(opt);
    EXPECT_TRUE(has(err, "injected failure")) << err;
    EXPECT_FALSE(has(err, "another shard failed")) << err;
    EXPECT_EQ(list_dir(dir.str()), std::vector<std::string>{"out"});
    EXPECT_EQ(snapshot(dir.str("out")), (std::map<std::string, std::string>{{"old.txt", "old"}}));
  }
}

// The pieces below the converter: one shard of the stock fixture's plan.
struct StockShard {
  std::unique_ptr<Checkpoint> ck = Checkpoint::open(fixture("checkpoints/dsv4_stock"));
  ConvertPlan plan = make_convert_plan(*ck, detect_formats(*ck), Format::nvfp4, MtpExperts::auto_);
  std::vector<ExpertStats> stats = std::vector<ExpertStats>(plan.experts.size());
  ThreadPool pool{2};
};

TEST(ShardPipeline, StopsBetweenChunksWhenAnotherShardFailedAndRemovesItsFile) {
  StockShard s;
  ASSERT_FALSE(s.plan.shards.empty());
  TempDir dir;
  const std::string path = dir.str("shard.safetensors");
  std::atomic<bool> stop{false};
  ShardPipelineOptions so;
  so.stop = &stop;
  int chunks = 0;
  so.on_written = [&](uint64_t) {
    ++chunks;
    stop = true;  // another lane failed while this one was writing its first chunk
  };
  EXPECT_THROW(write_shard(s.plan, s.plan.shards[0], path, s.pool, so, &s.stats), ShardStopped);
  EXPECT_EQ(chunks, 1);
  EXPECT_EQ(list_dir(dir.str()), std::vector<std::string>{});

  // Set before it starts: nothing written at all.
  chunks = 0;
  so.on_written = [&](uint64_t) { ++chunks; };
  EXPECT_THROW(write_shard(s.plan, s.plan.shards[0], path, s.pool, so, &s.stats), ShardStopped);
  EXPECT_EQ(chunks, 0);
  EXPECT_EQ(list_dir(dir.str()), std::vector<std::string>{});
}

TEST(ShardPipeline, VerifyAcceptsTheShardAsWrittenAndRejectsAnyChangedByte) {
  StockShard s;
  TempDir dir;
  const std::string path = dir.str("shard.safetensors");
  const ShardPlan& shard = s.plan.shards[0];
  ShardResult r = write_shard(s.plan, shard, path, s.pool, {}, &s.stats);
  EXPECT_EQ(r.file_bytes, fs::file_size(path));
  verify_shard(path, r.tensors, r.offsets, shard.metadata, r.file_bytes, r.digest);  // no throw

  const uint64_t data_bytes = r.file_bytes - r.offsets[0];
  for (uint64_t at : {uint64_t(0), data_bytes / 2, data_bytes - 1}) {
    TempDir copy;
    const std::string bad = copy.str("shard.safetensors");
    fs::copy_file(path, bad);
    corrupt_data_byte(bad, at);
    try {
      verify_shard(bad, r.tensors, r.offsets, shard.metadata, r.file_bytes, r.digest);
      FAIL() << "a changed byte at " << at << " of the data must be an error";
    } catch (const Error& e) {
      EXPECT_TRUE(has(e.what(), bad)) << e.what();
      EXPECT_TRUE(has(e.what(), "read back differs")) << e.what();
    }
  }
  // A different tensor list or size than planned is an error too.
  std::vector<TensorSpec> renamed = r.tensors;
  renamed.back().name += "_x";
  EXPECT_THROW(verify_shard(path, renamed, r.offsets, shard.metadata, r.file_bytes, r.digest), Error);
  EXPECT_THROW(verify_shard(path, r.tensors, r.offsets, shard.metadata, r.file_bytes + 8, r.digest), Error);
}

}  // namespace
}  // namespace nibble
