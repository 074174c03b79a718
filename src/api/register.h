/* Buffer and window registrations (api/register.c). */
#ifndef WEFT_API_REGISTER_H
#define WEFT_API_REGISTER_H

struct ncclComm;

/* Frees every registration and window still held on comm; called when comm
 * is destroyed or aborted, so handles the program never deregistered do not
 * leak. Their handles are no longer accepted afterwards. */
void weft_register_release_comm(const struct ncclComm *comm);

#endif
