// `leantune consolidate --checkpoint OUT|OUT/checkpoint-N --out DIR [--state]`: turns a sharded ZeRO
// checkpoint (any number of ranks) into what one process uses: by default the trained model as
// the trainer writes it (a PEFT adapter folder, or a full model folder); with --state the
// single-process training state (state.safetensors + trainer_state.json), which `leantune train`
// without mpirun resumes from.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "commands.h"
#include "leantune/checkpoint.h"

namespace lt::cli {

void add_consolidate_command(CLI::App& app) {
  struct Args { std::string checkpoint, out; bool state = false; };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("consolidate", "Merge a sharded (ZeRO) checkpoint into a PEFT adapter or model folder, "
                                              "or with --state into a single-process training state");
  c->add_option("--checkpoint,-c", a->checkpoint, "a checkpoint folder, or a training output folder (its LATEST)")
      ->required();
  c->add_option("--out,-o", a->out, "output folder")->required();
  c->add_flag("--state", a->state, "write the resumable single-process state instead of the trained model");
  c->callback([a] {
    if (a->state) {
      const std::string dir = leantune::consolidate_sharded_checkpoint(a->checkpoint, a->out);
      fmt::print("wrote the single-process training state of {} to {} (resume with: leantune train CONFIG "
                 "--resume {})\n", dir, a->out, a->out);
      return;
    }
    fmt::print("wrote {}\n", leantune::export_sharded_checkpoint(a->checkpoint, a->out));
  });
}

}  // namespace lt::cli
