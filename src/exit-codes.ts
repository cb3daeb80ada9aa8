/**
 * Every exit code fencegate's commands end with, in one place; each command's help lists
 * its own. The sysexits(3) codes mean the same for every command (and the systemd unit's
 * RestartPreventExitStatus keeps 78 from being restarted: restarting does not fix a
 * configuration); the small codes are per command, named after the command.
 */
export const EXIT = {
  OK: 0,
  /** `doctor`: problems found. */
  DOCTOR_PROBLEMS: 1,
  /** `doctor --strict`: warnings only. */
  DOCTOR_WARNINGS: 2,
  /** Controller commands: the lease or fence said no (LEASE_HELD, NOT_HOLDER, LEASE_EXPIRED, STALE_TOKEN, UNKNOWN_TOKEN, STALE_SEQ, DUPLICATE). */
  REFUSED: 2,
  /** Controller commands: the device failed or may have acted (DEVICE_REJECTED, DEVICE_ERROR, OUTCOME_UNKNOWN). */
  DEVICE: 3,
  /** Controller commands: try again later (DEVICE_UNAVAILABLE, OVERLOADED, DEADLINE_EXCEEDED, no reply, broker unreachable). */
  UNAVAILABLE: 4,
  /** Controller commands: the request itself is wrong (INVALID_REQUEST, RETAINED_REQUEST, UNKNOWN_ACTUATOR, point errors). */
  INVALID: 5,
  /** `log`: no such actuator in the journal. */
  LOG_UNKNOWN_ACTUATOR: 5,
  /** EX_USAGE: the command line is wrong. */
  USAGE: 64,
  /** EX_NOINPUT: `log` finds no journal. */
  NO_JOURNAL: 66,
  /** EX_SOFTWARE: a bug; the log has the stack. */
  INTERNAL: 70,
  /** EX_IOERR: the journal is missing, unreadable or failing (the daemon never starts a fresh one by itself). */
  JOURNAL: 74,
  /** EX_CONFIG: the configuration cannot work (also: another gateway has this gatewayId, SQLite built for another Node). */
  CONFIG: 78,
} as const;
