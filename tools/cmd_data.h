/* cmd_data.h: `iabn data` (bench, synth, info).  argv[0] is "data"; returns
 * a process exit status: 0 success, 1 failure, 2 bad usage. */
#ifndef IABN_TOOLS_CMD_DATA_H
#define IABN_TOOLS_CMD_DATA_H

int iabn_cmd_data(int argc, char **argv);

#endif
