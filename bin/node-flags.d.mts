/** The V8 flags on node's command line wherever the daemon is started. */
export declare const NODE_FLAGS: readonly string[];
