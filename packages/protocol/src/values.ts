/** Point values by point name: what a command sets and a state shows (docs/mqtt-api.md). */
export type PointValues = Readonly<Record<string, number>>;
