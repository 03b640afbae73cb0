//! `revenant-torture-worker`: one worker process of the torture harness. See
//! `revenant_torture::worker` for its arguments and exit codes.

fn main() {
    std::process::exit(revenant_torture::worker::main(std::env::args()));
}
