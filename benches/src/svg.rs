//! What every figure `sfs-bench` draws shares (plotters, SVG backend): the legend's place and
//! look, and a labelled line with a dot at each measured point.

use plotters::coord::CoordTranslate;
use plotters::prelude::*;

/// The drawing errors of an SVG figure.
pub(crate) type SvgError = DrawingAreaErrorKind<std::io::Error>;

/// Draws the chart's legend in its upper left corner, on white, framed.
pub(crate) fn legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
) -> Result<(), SvgError> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
}

/// Draws `points` as a line of `color` named `label` in the legend, with a dot on each.
pub(crate) fn dotted_line<'a, CT>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    points: &[CT::From],
    color: RGBColor,
    label: &str,
) -> Result<(), SvgError>
where
    CT: CoordTranslate,
    CT::From: Clone + 'static,
{
    chart
        .draw_series(LineSeries::new(points.to_vec(), color.stroke_width(2)))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    chart.draw_series(
        points
            .iter()
            .map(|p| Circle::new(p.clone(), 4, color.filled())),
    )?;
    Ok(())
}
