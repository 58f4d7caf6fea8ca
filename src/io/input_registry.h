// Every file a run reads, recorded as it is opened, so that no output ever
// replaces one of them (SPEC §8, README "Outputs"): whatever named the file —
// a command-line argument, an option (--cost-profile, --gpu-prices,
// --model-config), or a path written inside another input (a calibrate CSV's
// config.json) — the file is opened through ByteSource or read_json_file,
// which record it here, and OutputSet refuses an output that is one of them
// twice over: when the output is opened (the inputs read so far) and again
// when the set commits, before anything is renamed or written in place (the
// inputs read during the run).
//
// A file is known by device and inode, so a hard link, a symlink or `< file`
// on standard input is the same file. Only regular files are recorded: a
// FIFO, a device or a pipe is not a file an output could destroy. The
// registry is process-wide and thread-safe (plan's simulations open their
// trace from several threads); it holds one entry per distinct file.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace kvreplay {

struct InputFile {
  std::string name;  // how the run named it: "REQUESTS", "--cost-profile"; empty: unnamed
  std::string path;  // as given
  dev_t device = 0;
  ino_t inode = 0;
};

// Records the regular file open on `fd` (read from `path`). A file recorded
// already keeps its first path; a name given later fills an empty one.
void record_input(int fd, const std::string& path, const std::string& name = {});
// The same, by path ("-": standard input); a path that cannot be stat'ed, or
// is no regular file, is not recorded.
void record_input_path(const std::string& path, const std::string& name = {});

// The recorded input that is this file, if any.
std::optional<InputFile> find_input(dev_t device, ino_t inode);

// Forgets every input (tests that run several commands in one process).
void forget_inputs();

}  // namespace kvreplay
