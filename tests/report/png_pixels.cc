// png_pixels FILE.png: prints "WIDTH HEIGHT NON_WHITE COLOURED" for an 8-bit,
// non-interlaced RGB or RGBA PNG (what headless Chromium's --screenshot
// writes). NON_WHITE counts pixels that are not (near) white; COLOURED counts
// saturated pixels (max - min channel > 60), i.e. chart lines and bands
// rather than grey text and borders. Exit 2 for a file it cannot read.
// For tests/report/run_html_browser_test.sh; zlib is the only dependency.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const char* why) {
  std::fprintf(stderr, "png_pixels: %s\n", why);
  std::exit(2);
}

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

int paeth(int a, int b, int c) {
  int p = a + b - c;
  int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) fail("usage: png_pixels FILE.png");
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<unsigned char> file((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  static const unsigned char kMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (file.size() < 8 || !std::equal(kMagic, kMagic + 8, file.begin())) fail("not a PNG");
  std::uint32_t width = 0, height = 0;
  int channels = 0;
  std::vector<unsigned char> idat;
  for (std::size_t at = 8; at + 12 <= file.size();) {
    std::uint32_t length = be32(&file[at]);
    if (length > file.size() - at - 12) fail("truncated chunk");
    std::string type(reinterpret_cast<const char*>(&file[at + 4]), 4);
    const unsigned char* body = &file[at + 8];
    if (type == "IHDR") {
      if (length < 13) fail("bad IHDR");
      width = be32(body);
      height = be32(body + 4);
      if (body[8] != 8 || body[12] != 0) fail("only 8-bit non-interlaced PNGs");
      channels = body[9] == 2 ? 3 : body[9] == 6 ? 4 : 0;
      if (channels == 0) fail("only RGB or RGBA PNGs");
    } else if (type == "IDAT") {
      idat.insert(idat.end(), body, body + length);
    } else if (type == "IEND") {
      break;
    }
    at += 12 + length;
  }
  if (width == 0 || height == 0 || width > 20000 || height > 20000) fail("bad size");
  const std::size_t stride = std::size_t{width} * static_cast<std::size_t>(channels);
  std::vector<unsigned char> raw((stride + 1) * height);
  uLongf raw_size = static_cast<uLongf>(raw.size());
  if (uncompress(raw.data(), &raw_size, idat.data(), static_cast<uLong>(idat.size())) != Z_OK ||
      raw_size != raw.size()) {
    fail("bad image data");
  }
  std::vector<unsigned char> previous(stride, 0), row(stride);
  std::uint64_t non_white = 0, coloured = 0;
  for (std::uint32_t y = 0; y < height; ++y) {
    const unsigned char* line = &raw[y * (stride + 1)];
    const int filter = line[0];
    for (std::size_t i = 0; i < stride; ++i) {
      int x = line[1 + i];
      int a =
          i >= static_cast<std::size_t>(channels) ? row[i - static_cast<std::size_t>(channels)] : 0;
      int b = previous[i];
      int c = i >= static_cast<std::size_t>(channels)
                  ? previous[i - static_cast<std::size_t>(channels)]
                  : 0;
      int value = 0;
      switch (filter) {
        case 0: value = x; break;
        case 1: value = x + a; break;
        case 2: value = x + b; break;
        case 3: value = x + (a + b) / 2; break;
        case 4: value = x + paeth(a, b, c); break;
        default: fail("bad filter");
      }
      row[i] = static_cast<unsigned char>(value & 0xFF);
    }
    for (std::size_t px = 0; px < width; ++px) {
      const unsigned char* p = &row[px * static_cast<std::size_t>(channels)];
      int hi = std::max({p[0], p[1], p[2]}), lo = std::min({p[0], p[1], p[2]});
      if (lo < 245) ++non_white;
      if (hi - lo > 60) ++coloured;
    }
    std::swap(previous, row);
  }
  std::printf("%u %u %llu %llu\n", width, height, static_cast<unsigned long long>(non_white),
              static_cast<unsigned long long>(coloured));
  return 0;
}
