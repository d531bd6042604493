// What `nibble convert` must never do: modify SRC, clobber a DST, or leave
// anything half-written behind — whether the input is corrupt, DST cannot be
// written, the disk fills up, or the user presses Ctrl-C. Each case runs the
// nibble binary and then inspects the file system.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "checkpoint/safetensors_writer.h"
#include "convert_test_util.h"

namespace nibble {
namespace {

using namespace convert_test;
namespace fs = std::filesystem;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Nothing but `expected` in `dir`: in particular no DST and no hidden
// temporary folder.
void expect_only(const std::string& dir, std::vector<std::string> expected) {
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(list_dir(dir), expected);
}

// A checkpoint convert cannot read is refused before anything is written:
// a non-zero exit naming its format, no DST, no temporary folder (it used
// to print "0 matrices converted", exit 0 and write a config.json that had
// lost AWQ's group_size).
TEST(ConvertSafety, RefusesCheckpointsItCannotRead) {
  struct Case {
    const char* fixture;
    const char* named;
  };
  // (gpt-oss's MXFP4 checkpoints are converted: convert_gpt_oss_test.cpp.)
  for (const Case& c : {Case{"checkpoints/awq", "awq"}, Case{"checkpoints/gptq", "gptq"},
                        Case{"checkpoints/kimi_compressed_tensors", "compressed-tensors"}}) {
    for (const char* to : {"nvfp4", "mxfp4"}) {
      TempDir dir;
      RunResult r = run_nibble({"convert", fixture(c.fixture), dir.str("out"), "--to", to, "--quiet"});
      EXPECT_EQ(r.exit_code, 1) << c.fixture << ": " << r.err;
      EXPECT_TRUE(has(r.err, c.named)) << c.fixture << ": " << r.err;
      EXPECT_FALSE(has(r.out, "converted")) << r.out;
      expect_only(dir.str(), {});
    }
  }
}

TEST(ConvertSafety, RefusesANonEmptyDstAndLeavesItAlone) {
  TempDir dir;
  fs::create_directory(dir.str("out"));
  write_file(dir.str("out/keep.txt"), "mine");
  RunResult r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("out"), "--to", "nvfp4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "not empty")) << r.err;
  EXPECT_TRUE(has(r.err, "--force")) << r.err;
  EXPECT_EQ(snapshot(dir.str("out")), (std::map<std::string, std::string>{{"keep.txt", "mine"}}));
  expect_only(dir.str(), {"out"});
}

TEST(ConvertSafety, ForceReplacesDstOnlyWithACompleteCheckpoint) {
  TempDir dir;
  fs::create_directory(dir.str("out"));
  write_file(dir.str("out/old.txt"), "old");
  RunResult r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("out"), "--to", "nvfp4", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir.str("out/old.txt")));
  EXPECT_TRUE(fs::exists(dir.str("out/hf_quant_config.json")));
  expect_only(dir.str(), {"out"});

  // A failing forced conversion keeps the old DST as it was.
  TempDir bad;
  copy_tree(fixture("checkpoints/dsv4_stock"), bad.str("src"));
  std::string shard = bad.str("src/model-00002-of-00002.safetensors");
  fs::resize_file(shard, fs::file_size(shard) - 100);
  auto before = snapshot(dir.str("out"));
  r = run_nibble({"convert", bad.str("src"), dir.str("out"), "--to", "mxfp4", "--force"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(snapshot(dir.str("out")), before);
  expect_only(dir.str(), {"out"});
}

TEST(ConvertSafety, AnEmptyDstFolderIsFine) {
  TempDir dir;
  fs::create_directory(dir.str("out"));
  RunResult r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("out"), "--to", "nvfp4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir.str("out/config.json")));
}

TEST(ConvertSafety, TruncatedShardIsAClearErrorAndLeavesNothing) {
  TempDir dir;
  copy_tree(fixture("checkpoints/dsv4_stock"), dir.str("src"));
  std::string shard = dir.str("src/model-00001-of-00002.safetensors");
  fs::resize_file(shard, fs::file_size(shard) / 2);
  auto before = snapshot(dir.str("src"));
  RunResult r = run_nibble({"convert", dir.str("src"), dir.str("out"), "--to", "nvfp4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "model-00001-of-00002.safetensors")) << r.err;
  EXPECT_TRUE(has(r.err, "nothing was written")) << r.err;
  expect_only(dir.str(), {"src"});
  EXPECT_EQ(snapshot(dir.str("src")), before);
}

TEST(ConvertSafety, CorruptExpertTensorFailsMidWayAndLeavesNothing) {
  // A NaN block scale (UE8M0 0xFF) in an expert of the second shard: the
  // header is valid, so the error comes while converting, after the first
  // shard was written.
  TempDir dir;
  copy_tree(fixture("checkpoints/dsv4_stock"), dir.str("src"));
  std::string path = dir.str("src/model-00002-of-00002.safetensors");
  std::string bytes = read_file(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  const std::string name = "layers.2.ffn.experts.1.w3.scale";
  ASSERT_TRUE(header.contains(name));
  bytes[8 + n + header[name]["data_offsets"][0].get<size_t>() + 5] = char(0xFF);
  write_file(path, bytes);
  RunResult r = run_nibble({"convert", dir.str("src"), dir.str("out"), "--to", "nvfp4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "layers.2.ffn.experts.1.w3")) << r.err;
  EXPECT_TRUE(has(r.err, "NaN")) << r.err;
  EXPECT_FALSE(has(r.err, "another shard failed")) << r.err;  // the first shard is written at the same time
  expect_only(dir.str(), {"src"});

  // The same with a NaN in a BF16 expert to be quantized.
  TempDir dir2;
  copy_tree(fixture("checkpoints/dsv4_bf16"), dir2.str("src"));
  path = dir2.str("src/model.safetensors");
  bytes = read_file(path);
  std::memcpy(&n, bytes.data(), 8);
  header = nlohmann::json::parse(bytes.substr(8, n));
  const std::string bf = "layers.1.ffn.experts.0.w2.weight";
  size_t at = 8 + n + header[bf]["data_offsets"][0].get<size_t>() + 2 * 70;
  bytes[at] = char(0xC0);
  bytes[at + 1] = char(0x7F);
  write_file(path, bytes);
  r = run_nibble({"convert", dir2.str("src"), dir2.str("out"), "--to", "mxfp4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "layers.1.ffn.experts.0.w2")) << r.err;
  expect_only(dir2.str(), {"src"});
}

TEST(ConvertSafety, UnwritableDstIsAClearError) {
  TempDir dir;
  write_file(dir.str("file"), "x");
  RunResult r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("file/out"), "--to", "nvfp4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "not a folder")) << r.err;
  expect_only(dir.str(), {"file"});

  r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("missing/out"), "--to", "nvfp4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "does not exist")) << r.err;

  r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("file"), "--to", "nvfp4", "--force"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "not a folder")) << r.err;
  EXPECT_EQ(read_file(dir.str("file")), "x");

  // /proc refuses new folders even to root.
  r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), "/proc/nibble-convert-test-out", "--to", "nvfp4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "/proc")) << r.err;
  EXPECT_FALSE(fs::exists("/proc/nibble-convert-test-out"));
}

TEST(ConvertSafety, AWriteFailureLikeAFullDiskLeavesNothing) {
  // A file size limit makes write() fail with EFBIG part-way through a shard,
  // the way a full disk fails with ENOSPC.
  TempDir dir;
  RunResult r = run_nibble_in_shell("ulimit -f 64;",  // 64 blocks of 512 bytes: 32 kB
                                    {"convert", fixture("checkpoints/dsv4_stock"), dir.str("out"), "--to", "nvfp4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "write failed")) << r.err;
  EXPECT_TRUE(has(r.err, "nothing was written")) << r.err;
  expect_only(dir.str(), {});
}

TEST(ConvertSafety, SrcAndDstMustBeApart) {
  TempDir dir;
  copy_tree(fixture("checkpoints/dsv4_stock"), dir.str("src"));
  auto before = snapshot(dir.str("src"));
  for (const std::string& dst : {dir.str("src"), dir.str("src/inner"), dir.str()}) {
    RunResult r = run_nibble({"convert", dir.str("src"), dst, "--to", "nvfp4", "--force"});
    EXPECT_EQ(r.exit_code, 1) << dst;
    EXPECT_TRUE(has(r.err, "SRC")) << r.err;
  }
  EXPECT_EQ(snapshot(dir.str("src")), before);
  expect_only(dir.str(), {"src"});
}

// A synthetic stock-layout checkpoint big enough (~150 MB) that converting
// it takes a while: 3 layers x 16 experts of [1024, 2048] MXFP4 matrices.
void write_big_checkpoint(const std::string& dir) {
  fs::create_directory(dir);
  write_file(dir + "/config.json", R"({"architectures": ["DeepseekV4ForCausalLM"], "expert_dtype": "fp4"})");
  std::mt19937 rng(1);
  std::vector<uint8_t> packed(1024 * 1024), scales(1024 * 64);
  for (auto& b : packed) b = uint8_t(rng());
  for (auto& s : scales) s = uint8_t(118 + rng() % 6);
  std::vector<TensorSpec> specs;
  for (int l = 0; l < 3; ++l)
    for (int e = 0; e < 16; ++e)
      for (const char* w : {"w1", "w2", "w3"}) {
        std::string b = "layers." + std::to_string(l) + ".ffn.experts." + std::to_string(e) + "." + w;
        specs.push_back({b + ".weight", DType::I8, {1024, 1024}});
        specs.push_back({b + ".scale", DType::F8_E8M0, {1024, 64}});
      }
  SafetensorsWriter writer(dir + "/model.safetensors", specs);
  for (const auto& s : specs) {
    if (s.dtype == DType::I8) writer.write_tensor(s.name, packed.data(), packed.size());
    else writer.write_tensor(s.name, scales.data(), scales.size());
  }
  writer.finish();
}

// Starts a conversion, waits for its temporary folder to appear, signals it.
int convert_and_signal(const std::string& src, const std::string& parent, int sig) {
  const std::string dst = parent + "/out";
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl(NIBBLE_BINARY, NIBBLE_BINARY, "convert", src.c_str(), dst.c_str(), "--to", "nvfp4", "--quiet",
          (char*)nullptr);
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    for (const auto& name : list_dir(parent))
      if (name.rfind(".out.nibble-convert-", 0) == 0) seen = true;
    if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_TRUE(seen) << "the temporary folder never appeared";
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ConvertSafety, SigintAndSigtermLeaveNeitherDstNorTemporaryFiles) {
  TempDir src;
  write_big_checkpoint(src.str("big"));
  for (int sig : {SIGINT, SIGTERM}) {
    TempDir dir;
    int code = convert_and_signal(src.str("big"), dir.str(), sig);
    EXPECT_EQ(code, 128 + sig) << "signal " << sig;
    expect_only(dir.str(), {});
  }
}

TEST(ConvertSafety, LeftoversOfAKilledRunAreRemovedByTheNextOne) {
  // kill -9 cannot be cleaned up after; the next conversion to the same DST
  // removes the temporary folder of the dead process.
  TempDir src;
  write_big_checkpoint(src.str("big"));
  TempDir dir;
  int code = convert_and_signal(src.str("big"), dir.str(), SIGKILL);
  EXPECT_EQ(code, 128 + SIGKILL);
  bool leftover = false;
  for (const auto& n : list_dir(dir.str())) leftover |= n.rfind(".out.nibble-convert-", 0) == 0;
  EXPECT_TRUE(leftover);
  RunResult r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("out"), "--to", "nvfp4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_only(dir.str(), {"out"});
}

TEST(ConvertCli, HelpDescribesTheFlags) {
  RunResult r = run_nibble({"convert", "--help"});
  ASSERT_EQ(r.exit_code, 0);
  for (const char* s : {"SRC DST", "--to", "nvfp4", "mxfp4", "--force", "--mtp-experts", "--json", "--quiet",
                        "--threads", "--jobs", "input_scale", "SIGINT"})
    EXPECT_TRUE(has(r.out, s)) << s;
  r = run_nibble({"--help"});
  EXPECT_TRUE(has(r.out, "convert")) << r.out;
}

TEST(ConvertCli, BadUsageNamesTheFlag) {
  TempDir dir;
  // Bad usage exits 2 (convert --help promises it); a checkpoint convert
  // cannot handle is an error (1).
  RunResult r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("out")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "--to")) << r.err;
  r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("out"), "--to", "int4"});
  EXPECT_TRUE(has(r.err, "--to int4")) << r.err;
  r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("out"), "--to", "nvfp4", "--mtp-experts", "x"});
  EXPECT_TRUE(has(r.err, "--mtp-experts")) << r.err;
  r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("out"), "--to", "nvfp4", "--jobs", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "--jobs")) << r.err;
  r = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), "--to", "nvfp4"});
  EXPECT_TRUE(has(r.err, "SRC and DST")) << r.err;
  r = run_nibble({"convert", fixture("checkpoints/dsv4_base_fp8"), dir.str("out"), "--to", "nvfp4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "fp8_block128")) << r.err;
  expect_only(dir.str(), {});
}

}  // namespace
}  // namespace nibble
