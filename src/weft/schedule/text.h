#pragma once
// The text form of a schedule and the time x rank grid (docs/schedules.md, "Text form").
//
// Text form: a header line, then one line per pipeline rank, instructions separated by commas:
//   kind=1f1b pp=2 vp=1 microbatches=2
//   0F0,0SA0>1,0F1,0SA1>1,0RG0<1,0B0,0RG1<1,0B1
//   1RA0<0,1F0,1B0,1SG0>0,1RA1<0,1F1,1B1,1SG1>0
// An instruction is <stage><code><microbatch>, codes F B I W (op_code()); a send appends
// ">peer", a receive "<peer"; ReduceGrads is <stage>R and OptimizerStep is O. An empty program
// is "-". Blank lines and lines starting with '#' are ignored.
//
// Grid: one row per rank, one column per time unit of a unit-cost simulation (unit_costs()),
// each compute labelled code + microbatch ("F3", "B0", "I2", "W1"), followed, when vp > 1, by
// its model chunk as a letter (a = chunk 0, b = chunk 1, ...: "F3b" is microbatch 3 on the
// rank's second chunk); "." is an idle slot. Messages take no time on this clock and are not
// drawn.

#include <string>
#include <string_view>

#include "weft/core/status.h"
#include "weft/schedule/instr.h"
#include "weft/schedule/simulate.h"

namespace weft::schedule {

std::string instr_to_text(const Instr& instr);
Result<Instr> parse_instr(std::string_view text);
std::string program_to_text(const Program& program);
Result<Program> parse_program(std::string_view line);

std::string to_text(const Schedule& schedule);
// Parses and reports every malformed line; does not validate() the schedule.
Result<Schedule> parse_text(std::string_view text);

// The grid of a timeline whose drawn instructions start and end on whole time units.
std::string format_grid(const Timeline& timeline);
// The grid of simulate(schedule, unit_costs(schedule.shape)); if the schedule deadlocks, the
// grid stops where it does. Requires check_structure(schedule).
std::string format_grid(const Schedule& schedule);
// The cell label of a drawn instruction: "F3", or "F3b" when vp > 1.
std::string grid_label(const Instr& instr, const Shape& shape);

}  // namespace weft::schedule
