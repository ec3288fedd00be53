/**
 * A small metrics registry rendered in the Prometheus text exposition format 0.0.4. Every metric
 * has fixed label names, chosen by its owner, so the number of series stays bounded.
 */

export type Labels<L extends string> = Readonly<Record<L, string>>;

/** One series of a metric computed at scrape time. */
export interface Sample<L extends string> {
  labels: Labels<L>;
  value: number;
}

/** The default latency buckets, in seconds. */
const DURATION_BUCKETS: readonly number[] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

interface Metric {
  readonly name: string;
  /** The metric's lines after its HELP and TYPE lines. */
  lines(): Promise<string[]>;
  readonly help: string;
  readonly type: "counter" | "gauge" | "histogram";
}

/** One series of a counter, held by a caller that adds to it on a hot path: no key is built per add. */
export interface CounterSeries {
  inc(by?: number): void;
}

/** One series of a histogram, held as CounterSeries is. */
export interface HistogramSeries {
  observe(value: number): void;
}

export class Counter<L extends string> implements Metric {
  readonly type = "counter";
  private readonly values = new Map<string, { labels: Labels<L>; value: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly L[],
  ) {}

  inc(labels: Labels<L>, by = 1): void {
    this.entry(labels).value += by;
  }

  /** The series of `labels`, which appears in the output once it is first added to. */
  seriesOf(labels: Labels<L>): CounterSeries {
    let entry: { value: number } | undefined;
    return {
      inc: (by = 1) => {
        entry ??= this.entry(labels);
        entry.value += by;
      },
    };
  }

  private entry(labels: Labels<L>): { value: number } {
    const key = seriesKey(this.labelNames, labels);
    let series = this.values.get(key);
    if (!series) this.values.set(key, (series = { labels: { ...labels }, value: 0 }));
    return series;
  }

  lines(): Promise<string[]> {
    return Promise.resolve(
      [...this.values.values()].map((s) => sampleLine(this.name, this.labelNames, s.labels, s.value)),
    );
  }
}

interface HistogramEntry<L extends string> {
  labels: Labels<L>;
  counts: number[];
  sum: number;
  count: number;
}

export class Histogram<L extends string> implements Metric {
  readonly type = "histogram";
  private readonly series = new Map<string, HistogramEntry<L>>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly L[],
    private readonly buckets: readonly number[],
  ) {}

  observe(labels: Labels<L>, value: number): void {
    this.add(this.entry(labels), value);
  }

  /** The series of `labels`, which appears in the output once it is first observed. */
  seriesOf(labels: Labels<L>): HistogramSeries {
    let entry: HistogramEntry<L> | undefined;
    return {
      observe: (value) => this.add((entry ??= this.entry(labels)), value),
    };
  }

  private entry(labels: Labels<L>): HistogramEntry<L> {
    const key = seriesKey(this.labelNames, labels);
    let series = this.series.get(key);
    if (!series) this.series.set(key, (series = { labels: { ...labels }, counts: this.buckets.map(() => 0), sum: 0, count: 0 }));
    return series;
  }

  private add(series: HistogramEntry<L>, value: number): void {
    // Counted in the first bucket that holds the value only; rendering makes the buckets cumulative.
    const bucket = this.buckets.findIndex((upper) => value <= upper);
    if (bucket >= 0) series.counts[bucket]! += 1;
    series.sum += value;
    series.count += 1;
  }

  lines(): Promise<string[]> {
    const out: string[] = [];
    const names = [...this.labelNames, "le"];
    for (const s of this.series.values()) {
      let cumulative = 0;
      this.buckets.forEach((upper, i) => {
        cumulative += s.counts[i]!;
        out.push(sampleLine(`${this.name}_bucket`, names, { ...s.labels, le: formatNumber(upper) }, cumulative));
      });
      out.push(sampleLine(`${this.name}_bucket`, names, { ...s.labels, le: "+Inf" }, s.count));
      out.push(sampleLine(`${this.name}_sum`, this.labelNames, s.labels, s.sum));
      out.push(sampleLine(`${this.name}_count`, this.labelNames, s.labels, s.count));
    }
    return Promise.resolve(out);
  }
}

/** A gauge or counter whose samples are read when scraped (a database count, the process's CPU time). */
class Collected<L extends string> implements Metric {
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: "counter" | "gauge",
    private readonly labelNames: readonly L[],
    private readonly collect: () => Promise<Sample<L>[]> | Sample<L>[],
  ) {}

  async lines(): Promise<string[]> {
    return (await this.collect()).map((s) => sampleLine(this.name, this.labelNames, s.labels, s.value));
  }
}

export class Metrics {
  private readonly metrics = new Map<string, Metric>();

  counter<L extends string = never>(name: string, help: string, labelNames: readonly L[] = []): Counter<L> {
    return this.add(new Counter(name, help, labelNames));
  }

  histogram<L extends string = never>(
    name: string,
    help: string,
    labelNames: readonly L[] = [],
    buckets: readonly number[] = DURATION_BUCKETS,
  ): Histogram<L> {
    return this.add(new Histogram(name, help, labelNames, [...buckets].sort((a, b) => a - b)));
  }

  /** A metric whose samples `collect` reads at every scrape. */
  collected<L extends string = never>(
    name: string,
    help: string,
    type: "counter" | "gauge",
    labelNames: readonly L[],
    collect: () => Promise<Sample<L>[]> | Sample<L>[],
  ): void {
    this.add(new Collected(name, help, type, labelNames, collect));
  }

  /** Every metric, in the order registered; a metric with no series yet still says what it is. */
  async render(): Promise<string> {
    const blocks = await Promise.all(
      [...this.metrics.values()].map(async (m) =>
        [`# HELP ${m.name} ${escapeHelp(m.help)}`, `# TYPE ${m.name} ${m.type}`, ...(await m.lines())].join("\n"),
      ),
    );
    return `${blocks.join("\n")}\n`;
  }

  private add<M extends Metric>(metric: M): M {
    if (!/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(metric.name)) throw new Error(`invalid metric name ${metric.name}`);
    if (this.metrics.has(metric.name)) throw new Error(`metric ${metric.name} registered twice`);
    this.metrics.set(metric.name, metric);
    return metric;
  }
}

function seriesKey<L extends string>(labelNames: readonly L[], labels: Labels<L>): string {
  return JSON.stringify(labelNames.map((n) => labels[n]));
}

function sampleLine(name: string, labelNames: readonly string[], labels: Readonly<Record<string, string>>, value: number): string {
  if (labelNames.length === 0) return `${name} ${formatNumber(value)}`;
  const pairs = labelNames.map((n) => `${n}="${escapeLabelValue(labels[n] ?? "")}"`);
  return `${name}{${pairs.join(",")}} ${formatNumber(value)}`;
}

function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => (c === "\n" ? "\\n" : `\\${c}`));
}

function escapeHelp(help: string): string {
  return help.replace(/[\\\n]/g, (c) => (c === "\n" ? "\\n" : "\\\\"));
}

function formatNumber(value: number): string {
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}
