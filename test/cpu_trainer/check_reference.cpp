// Compares the CPU trainer with a golden file, tensor by tensor, and prints a table: max
// |ours − ref| and ‖ours − ref‖ / ‖ref‖. GPT-2's is PyTorch's (dev/reference/gpt2_reference.py),
// Llama-3's Hugging Face's LlamaForCausalLM (dev/reference/llama_reference.py; its float64
// model rounds RoPE's angles, RMSNorm and the softmax to float32, ~2e-7: far below 1e-5).
//
//   ./test/cpu_trainer/check_reference MODEL GOLDEN    (make check; make test runs it too)
// prints the table, then "N passed, M failed", and exits 1 if any row failed.
//
// Tolerances (normalised error), with the reason: both sides compute in float32-sized
// numbers but sum in different orders (the reference runs in float64, ours in float32),
// so forward values and gradients agree to ~1e-6; fail above 1e-5. After the AdamW steps
// the differences are amplified by Adam's division by √v for parameters with tiny
// gradients; fail above 1e-4. NaN always fails.
#define TRAIN_NO_MAIN
#include "../../train.cpp"
#include "../golden.h"

struct Table {
    int passed = 0, failed = 0;
    void row(const std::string& name, const float* ours, const float* ref, size_t n, double tol) {
        double max_abs = 0, num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)ours[i] - ref[i];
            max_abs = std::max(max_abs, std::fabs(d));
            if (std::isnan(d)) max_abs = NAN;
            num += d * d, den += (double)ref[i] * ref[i];
        }
        double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
        bool ok = rel <= tol && max_abs == max_abs;  // NaN fails both
        printf("%-22s %10zu %12.3e %12.3e %10.0e  %s\n", name.c_str(), n, max_abs, rel, tol, ok ? "ok" : "FAIL");
        ok ? passed++ : failed++;
    }
};

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL GOLDEN\n", argv[0]);
        return 2;
    }
    try {
        std::string model_file = argv[1], golden_file = argv[2];
        Golden g = read_golden(golden_file);
        ModelConfig mc = read_model_header(model_file);
        if (!shape_difference(mc, g.cfg).empty())
            throw Error("the model file and the golden file describe different models: " + shape_difference(mc, g.cfg));
        Model m;
        model_build(m, mc, g.B, g.T);
        load_model_params(model_file, mc, m.params.data());
        printf("%s reference: %s, B=%d T=%d, %d AdamW steps\n", mc.llama() ? "Hugging Face" : "PyTorch",
               describe_model(mc).c_str(), g.B, g.T, g.nsteps);
        printf("%-22s %10s %12s %12s %10s\n", "tensor", "elements", "max |diff|", "norm. error", "tolerance");
        Table table;

        // The golden batch is one stream of B·T+1 tokens, the layout the data loader reads:
        // serve it through the real loader, so the check covers the real train_step().
        std::vector<uint16_t> stream(g.inputs.begin(), g.inputs.end());
        stream.push_back((uint16_t)g.targets.back());
        DataLoader data("golden batch", stream, mc.V);
        BatchPlan plan = plan_batch(g.B, g.T, 1, 0);
        data.configure(plan.B, plan.T, plan.A, plan.R, 0, false, 0);
        data.next_chunk();
        data.micro_batch(0, m.inputs.data(), m.targets.data());
        if (m.inputs != g.inputs || m.targets != g.targets)
            throw Error("the golden inputs and targets are not one contiguous token stream");
        data.reset();

        // forward and gradient at the initial parameters
        model_forward(m, g.inputs.data(), g.B, g.T);
        std::vector<float> logits((size_t)g.B * g.T * mc.V);
        for (size_t r = 0; r < (size_t)g.B * g.T; r++)
            std::copy(m.a.logits + r * mc.Vp, m.a.logits + r * mc.Vp + mc.V, logits.begin() + r * mc.V);
        table.row("logits", logits.data(), g.logits.data(), logits.size(), 1e-5);
        float loss = model_loss(m, g.targets.data(), g.B, g.T);
        table.row("loss", &loss, &g.loss, 1, 1e-5);
        std::fill(m.grads.begin(), m.grads.end(), 0.0f);
        model_backward(m, g.inputs.data(), g.targets.data(), g.B, g.T, 1.0f / (g.B * g.T));
        std::vector<size_t> sizes = mc.param_sizes();
        size_t off = 0;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            if (sizes[t] == 0) continue;  // a tensor the family does not have
            table.row(std::string("grad ") + PARAM_NAMES[t], m.grads.data() + off, g.grads.data() + off, sizes[t], 1e-5);
            off += sizes[t];
        }

        // nsteps optimizer steps on the same batch, through train_step()
        Comm single;
        AdamWConfig opt{g.beta1, g.beta2, g.eps, g.weight_decay};
        std::vector<float> losses;
        for (int s = 1; s <= g.nsteps; s++)
            losses.push_back(train_step(m, data, plan, single, opt, g.lr, g.grad_clip, s).loss);
        table.row(strf("losses of %d steps", g.nsteps), losses.data(), g.losses.data(), losses.size(), 1e-5);
        off = 0;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            if (sizes[t] == 0) continue;
            table.row(strf("%s after %d steps", PARAM_NAMES[t], g.nsteps), m.params.data() + off,
                      g.params_after.data() + off, sizes[t], 1e-4);
            off += sizes[t];
        }
        printf("%d passed, %d failed\n", table.passed, table.failed);
        return table.failed ? 1 : 0;
    } catch (const Error& e) {
        fprintf(stderr, "check_reference: error: %s\n", e.what());
        return 1;
    }
}
