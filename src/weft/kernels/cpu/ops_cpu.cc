#include "weft/kernels/kernels.h"
