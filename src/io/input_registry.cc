#include "io/input_registry.h"

#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <vector>

namespace kvreplay {

namespace {

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<InputFile>& registry() {
  static std::vector<InputFile> files;
  return files;
}

void record(const struct stat& info, const std::string& path, const std::string& name) {
  if (!S_ISREG(info.st_mode)) return;
  std::lock_guard lock(registry_mutex());
  for (InputFile& file : registry()) {
    if (file.device != info.st_dev || file.inode != info.st_ino) continue;
    if (file.name.empty() && !name.empty()) {
      file.name = name;
      file.path = path;
    }
    return;
  }
  registry().push_back(InputFile{name, path, info.st_dev, info.st_ino});
}

}  // namespace

void record_input(int fd, const std::string& path, const std::string& name) {
  struct stat info {};
  if (::fstat(fd, &info) == 0) record(info, path, name);
}

void record_input_path(const std::string& path, const std::string& name) {
  struct stat info {};
  const int status = path == "-" ? ::fstat(STDIN_FILENO, &info) : ::stat(path.c_str(), &info);
  if (status == 0) record(info, path, name);
}

std::optional<InputFile> find_input(dev_t device, ino_t inode) {
  std::lock_guard lock(registry_mutex());
  for (const InputFile& file : registry()) {
    if (file.device == device && file.inode == inode) return file;
  }
  return std::nullopt;
}

void forget_inputs() {
  std::lock_guard lock(registry_mutex());
  registry().clear();
}

}  // namespace kvreplay
