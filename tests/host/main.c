/* main.c - the host test suite: runs every LOOM_TEST linked in. */
#include "tests/common/test.h"
int main(int argc, char **argv) { return loom_test_main(argc, argv); }
