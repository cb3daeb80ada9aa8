/** A small valid configuration (as plain data, before defaults) for the config tests to vary. */
export function minimalConfig(): Record<string, any> {
  return {
    gatewayId: "gw1",
    mqtt: { url: "mqtt://127.0.0.1:1883" },
    buses: {
      line1: { type: "rtu", path: "/dev/ttyUSB0" },
      plc: { type: "tcp", host: "10.0.0.5" },
    },
    actuators: [
      {
        id: "valve-1",
        bus: "line1",
        unit: 1,
        profile: "fenced",
        points: {
          position: { register: 100, scale: 0.01, min: 0, max: 100, writable: true, unit: "%" },
          actual: { register: 101, scale: 0.01, min: 0, max: 100 },
        },
        expiry: { policy: "safe", set: { position: 0 } },
      },
      {
        id: "damper-1",
        bus: "line1",
        unit: 2,
        profile: "plain",
        points: { position: { register: 100, min: 0, max: 100, writable: true } },
      },
    ],
  };
}
