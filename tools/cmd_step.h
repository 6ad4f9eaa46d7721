/* cmd_step.h: `iabn step`, one forward (and backward) of a named model on
 * inputs and weights from safetensors files, everything it computed written
 * to another: the C side of the PyTorch parity check (tests/fixtures/parity.py).
 *
 *     iabn step MODEL --input X.safetensors [--weights W.safetensors]
 *               [--bn MODE] [--classes N] [--act leaky_relu|elu|relu|identity]
 *               [--act-param F] [--train|--eval] [--no-dropout] [--threads T]
 *               --out O.safetensors
 *
 * X holds `input` (float32 N,3,H,W) and, for a loss, `target` (int64 or
 * int32; N for classification, N,H,W for segmentation; 255 ignored).  O gets
 * `logits`, `loss`, `grad.<name>` for every parameter (training) and the
 * running statistics under their names.  Returns 0, 1 (failure) or 2 (usage). */
#ifndef IABN_TOOLS_CMD_STEP_H
#define IABN_TOOLS_CMD_STEP_H

int iabn_cmd_step(int argc, char **argv);

#endif
