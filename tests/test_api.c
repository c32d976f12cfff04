#include "check.h"
#include "ropekit.h"
int main(void) { return REPORT(); }
