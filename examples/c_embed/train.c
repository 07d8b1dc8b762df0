/* Trains the W1 MLP from C with the library symgrad exported (no Python, no NumPy):
   100 Adam steps on data this program makes up, printing the loss of each step.

       symgrad export examples/c_embed/model.py --target c-library -o mlp_step --name mlp_step
       cc -std=gnu11 -O2 -Imlp_step examples/c_embed/train.c mlp_step/libmlp_step.a \
          $(make -s -C mlp_step libs) -o train
       ./train mlp_step/mlp_step.params

   Arguments: the parameter file, then optionally the batch size (64), the number of steps
   (100) and a file to write each step's batch to (x as float32, then labels as int64), which
   lets a test feed the same data to the program run from Python. The data: x uniform in
   [-1, 1) from a fixed linear congruential generator, and the label of a row the index of the
   largest of its first 10 features, a rule the MLP can learn, so the loss falls. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mlp_step.h"

#define FEATURES 784
#define CLASSES 10

static uint32_t seed = 12345;

static float uniform(void)   /* in [-1, 1) */
{
    seed = seed * 1664525u + 1013904223u;
    return (float)(seed >> 8) / 8388608.0f - 1.0f;
}

static void make_batch(float *x, int64_t *labels, int64_t batch)
{
    for (int64_t i = 0; i < batch; i++) {
        int64_t best = 0;
        for (int64_t j = 0; j < FEATURES; j++) {
            x[i * FEATURES + j] = uniform();
            if (j < CLASSES && x[i * FEATURES + j] > x[i * FEATURES + best])
                best = j;
        }
        labels[i] = best;
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PARAMS [BATCH [STEPS [DATA_OUT]]]\n", argv[0]);
        return 2;
    }
    const int64_t batch = argc > 2 ? atoll(argv[2]) : 64;
    const int steps = argc > 3 ? atoi(argv[3]) : 100;
    FILE *data = argc > 4 ? fopen(argv[4], "wb") : NULL;
    mlp_step_state *state = mlp_step_state_new();
    if (state == NULL || mlp_step_state_load(state, argv[1]) != MLP_STEP_OK) {
        fprintf(stderr, "train: %s\n", mlp_step_last_error());
        return 1;
    }
    float *x = malloc(sizeof(float) * FEATURES * batch);
    int64_t *labels = malloc(sizeof(int64_t) * batch);
    int status = 0;
    for (int step = 0; step < steps && x != NULL && labels != NULL; step++) {
        float loss;
        make_batch(x, labels, batch);
        if (data != NULL) {
            fwrite(x, sizeof(float), FEATURES * batch, data);
            fwrite(labels, sizeof(int64_t), batch, data);
        }
        if (mlp_step_run(state, x, batch, labels, batch, &loss) != MLP_STEP_OK) {
            fprintf(stderr, "train: step %d: %s\n", step, mlp_step_last_error());
            status = 1;
            break;
        }
        printf("step %d loss %.9g\n", step, loss);
    }
    if (data != NULL)
        fclose(data);
    free(x);
    free(labels);
    mlp_step_state_free(state);
    return status;
}
