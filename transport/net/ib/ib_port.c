/* A port's MTU and link speed as verbs encode them (enum ibv_mtu;
 * active_speed and active_width bits, IBTA's PortInfo), mapped as NCCL
 * maps them (net_ib.cc: ibvSpeeds, ibvWidths), so the speed weft reports
 * for a port is the one NCCL reports. Where NCCL takes an unknown code for
 * the last row of its table (XDR, 2x), weft reports 0: unknown. */
#include "transport/net/ib/ib.h"

int weft_ib_mtu_bytes(int ibv_mtu) {
  return ibv_mtu >= 1 && ibv_mtu <= 5 ? 128 << ibv_mtu : 0;
}

int weft_ib_mtu_from_bytes(int bytes) {
  for (int m = 1; m <= 5; m++)
    if (weft_ib_mtu_bytes(m) == bytes) return m;
  return 0;
}

/* The one bit set in code, as an index; -1 when not exactly one is. */
static int bit_index(unsigned code) {
  if (code == 0 || (code & (code - 1)) != 0) return -1;
  int i = 0;
  while ((code >> i) != 1) i++;
  return i;
}

int weft_ib_port_speed(unsigned active_speed, unsigned active_width) {
  /* Mb/s per lane: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR (the
   * last is active_speed_ex's code 256, past active_speed's 8 bits). */
  static const int lane_rate[] = {2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000, 200000};
  static const int lanes[] = {1, 4, 8, 12, 2}; /* 1x, 4x, 8x, 12x, 2x */
  int s = bit_index(active_speed), w = bit_index(active_width);
  if (s < 0 || s >= (int)(sizeof(lane_rate) / sizeof(lane_rate[0]))) return 0;
  if (w < 0 || w >= (int)(sizeof(lanes) / sizeof(lanes[0]))) return 0;
  return lane_rate[s] * lanes[w];
}
