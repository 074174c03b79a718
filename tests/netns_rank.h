/* What one rank of test_netns does inside its simulated host (netns_rank.c):
 * the rank process is this test binary exec'd again with --rank. */
#ifndef WEFT_TESTS_NETNS_RANK_H
#define WEFT_TESTS_NETNS_RANK_H

#define NETNS_NRANKS 4

/* Exit statuses of a rank process. */
enum netns_rank_exit {
  NETNS_RANK_OK = 0,       /* "colls": all correct; "linkdown": got an error */
  NETNS_RANK_FAILED = 1,   /* something wrong (said on stderr) */
  NETNS_RANK_NO_ERROR = 3, /* "linkdown": the loop ended without any error */
};

/* Runs phase "colls" or "linkdown" as rank `rank`; the communicator comes
 * from NCCL_COMM_ID and WEFT_COMM_SECRET. Returns an exit status. */
int netns_rank_main(int rank, const char *phase);

#endif
