/* weft's own additions to the NCCL API (nccl.h holds NCCL's). */
#ifndef WEFT_H
#define WEFT_H

#define WEFT_MAJOR 0
#define WEFT_MINOR 1
#define WEFT_PATCH 0

#endif
