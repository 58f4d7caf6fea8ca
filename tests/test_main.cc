#include "catch_main.h"

int main(int argc, char** argv) {
  return kvreplay::test::catch_main(argc, argv);
}
