// Linked with one layer of src/ whole (every object of its library) and only
// the layers it declares: a reference to anything above fails the link. Runs
// nothing. See tests/layers/layers.cmake.
int main() {
  return 0;
}
