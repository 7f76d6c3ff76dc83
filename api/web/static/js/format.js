// Numbers with their units. The API's GB is 10^9 bytes, its GB/s 10^9 bytes per second.

const nf = (digits) =>
  new Intl.NumberFormat("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });

export function num(x, digits = 0) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "—";
  return nf(digits).format(x);
}

/** Three significant figures, no exponent for everyday magnitudes. */
export function sig(x, figures = 3) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "—";
  if (x === 0) return "0";
  const digits = Math.max(0, figures - 1 - Math.floor(Math.log10(Math.abs(x))));
  return num(x, Math.min(digits, 6));
}

export function seconds(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "—";
  const a = Math.abs(s);
  if (a === 0) return "0 s";
  if (a >= 1) return `${sig(s, 4)} s`;
  if (a >= 1e-3) return `${sig(s * 1e3, 3)} ms`;
  return `${sig(s * 1e6, 3)} µs`;
}

export function bytes(b) {
  if (b === null || b === undefined || !Number.isFinite(b)) return "—";
  const a = Math.abs(b);
  for (const [unit, scale] of [["TB", 1e12], ["GB", 1e9], ["MB", 1e6], ["kB", 1e3]]) {
    if (a >= scale) return `${sig(b / scale, 3)} ${unit}`;
  }
  return `${num(b)} B`;
}

export const gbps = (x) => `${sig(x, 3)} GB/s`;
export const pct = (x, digits = 1) => `${num(x * 100, digits)} %`;
export const tflops = (x) => `${sig(x, 3)} TFLOP/s`;

/** A signed difference, e.g. "+12.3 ms". */
export function signedSeconds(s) {
  if (!Number.isFinite(s)) return "—";
  if (s === 0) return "±0 s";
  return (s > 0 ? "+" : "−") + seconds(Math.abs(s));
}

/** A count with a k/M/G suffix, e.g. "166 k". */
export function count(x) {
  if (!Number.isFinite(x)) return "—";
  for (const [unit, scale] of [["G", 1e9], ["M", 1e6], ["k", 1e3]]) {
    if (Math.abs(x) >= scale) return `${sig(x / scale, 3)} ${unit}`;
  }
  return sig(x, 3);
}
