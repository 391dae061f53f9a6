"""Reference GAE and V-trace for tests/rl_returns_test.cpp, written from the papers' formulas with
numpy alone, as explicit sums rather than the backward recursions Tandem uses:
  GAE (Schulman et al. 2016, eq. 16):  A_t = sum_{l=0}^{L} (gamma lambda)^l delta_{t+l}
  V-trace (Espeholt et al. 2018, eq. 1): v_s = V(x_s) + sum_{t=s}^{L} gamma^{t-s} (prod_{i=s}^{t-1} c_i) rho_t delta_t
  and its policy-gradient advantage rho_s (r_s + gamma v_{s+1} - V(x_s)),
where L is the episode's last step inside the slot (its end, or T - 1), delta_t = r_t + gamma next_t -
V(x_t), and next_t is 0 after a termination, V(final observation) after a truncation, else V(x_{t+1}).

usage: rl_returns_reference.py INPUT_FILE
INPUT_FILE: a line "T N gamma lambda rho_bar c_bar", then rewards (T lines of N), values (T + 1
lines), final_values, terminated, truncated, log_rhos (T lines each). Prints advantages, returns, vs
and pg_advantages, T lines of N each, in that order.
"""
import sys

import numpy as np


def main():
    lines = open(sys.argv[1]).read().split("\n")
    head = lines[0].split()
    T, N = int(head[0]), int(head[1])
    gamma, lam, rho_bar, c_bar = (float(x) for x in head[2:6])
    rows = [np.array(line.split(), dtype=np.float64) for line in lines[1:] if line.strip()]
    at = 0

    def take(count):
        nonlocal at
        out = np.stack(rows[at:at + count])
        at += count
        return out

    r, v, fv = take(T), take(T + 1), take(T)
    term, trunc, log_rho = take(T) != 0, take(T) != 0, take(T)

    ended = term | trunc
    nxt = np.where(term, 0.0, np.where(trunc, fv, v[1:]))
    delta = r + gamma * nxt - v[:T]

    def last_step(s, n):  # the step where the episode containing step s ends, or T - 1
        t = s
        while t < T - 1 and not ended[t, n]:
            t += 1
        return t

    adv = np.zeros((T, N))
    vs = np.zeros((T, N))
    rho = np.minimum(rho_bar, np.exp(log_rho))
    c = np.minimum(c_bar, np.exp(log_rho))
    for n in range(N):
        for s in range(T):
            L = last_step(s, n)
            adv[s, n] = sum((gamma * lam) ** (t - s) * delta[t, n] for t in range(s, L + 1))
            vs[s, n] = v[s, n] + sum(gamma ** (t - s) * np.prod(c[s:t, n]) * rho[t, n] * delta[t, n]
                                     for t in range(s, L + 1))
    # v_{s+1}: the next step's target inside the episode, else what step s bootstraps from
    vs_next = np.zeros((T, N))
    for n in range(N):
        for s in range(T):
            if ended[s, n]:
                vs_next[s, n] = nxt[s, n]
            elif s + 1 < T:
                vs_next[s, n] = vs[s + 1, n]
            else:
                vs_next[s, n] = v[T, n]
    pg = rho * (r + gamma * vs_next - v[:T])
    for block in (adv, adv + v[:T], vs, pg):
        for row in block:
            print(" ".join(repr(float(x)) for x in row))


if __name__ == "__main__":
    main()
