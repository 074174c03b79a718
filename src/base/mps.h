/* Whether an MPS control daemon is running: see mps.c. */
#ifndef WEFT_BASE_MPS_H
#define WEFT_BASE_MPS_H

/* 1 when something answers at path, an MPS control daemon's control pipe
 * or socket (CUDA_MPS_PIPE_DIRECTORY/control): a FIFO with a reader, a
 * socket that accepts, or a file of another kind (not knowable: taken as
 * live). 0 when there is no such file, or it was left behind by a daemon
 * that has quit (a FIFO without a reader, a socket nobody listens on). */
int weft_mps_daemon_live(const char *path);

#endif
